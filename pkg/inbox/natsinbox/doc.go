// Package natsinbox is the inbox's NATS client: what an agent uses to list,
// read and acknowledge its inbox entries and to declare a turn's epoch
// (inbox.API over the svc operations of docs/protocol.md §11.5).
//
// It is a package of its own, apart from the service (inboxsvc) and the
// storage backends, so that the agent SDK that imports it pulls in nothing
// beyond nats.go and the protocol packages (card, utp, svc, subjects): no
// bbolt, no JetStream server code, no OpenTelemetry exporter.
package natsinbox
