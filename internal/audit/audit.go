// Package audit publishes the mesh's security audit records: one JSON
// object per refused forgery or per administrative change, on
//
//	cg.<ver>.<project_id>.<channel_id>.evt.sys.audit.<service>
//
// which the event stream (cg_evt_<ver>) stores. A record names who acted
// as precisely as the mesh can prove it (docs/security.md, "Audit"): the
// verified nkey identity of a signed admin request, or the tool whose
// subject a worker's write came on. Records never carry card contents,
// arguments, policies' text or tokens.
package audit

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/subjects"
)

// Record is one audit record.
type Record struct {
	// Time is when the service decided.
	Time time.Time `json:"time"`
	// Service and Op name what was asked: cardstore put_result, authz
	// put, registry delete…
	Service string `json:"service"`
	Op      string `json:"op"`
	// Project and Channel come from the request's subject.
	Project string `json:"project_id"`
	Channel string `json:"channel_id"`
	// Actor is who asked: "identity:<name>" (a verified nkey signature,
	// e.g. identity:admin), "tool:<token>" (a requester allowed to publish
	// that tool's subject: its worker identity, core or admin), or
	// "unverified:<what the subject allows>" when nothing narrower is
	// proven.
	Actor string `json:"actor"`
	// Allowed is false for a refusal, true for a change that was made.
	Allowed bool `json:"allowed"`
	// Code is the wire error code of a refusal (forbidden, wrong_op…).
	Code string `json:"code,omitempty"`
	// Reason says what was refused or changed, for a person.
	Reason string `json:"reason,omitempty"`
	// Subject is the request's subject.
	Subject string `json:"subject"`
	// Detail holds ids that say what the request was about (card ids,
	// tool_call_id, tool name, policy version…).
	Detail map[string]string `json:"detail,omitempty"`
}

// Publish sends rec on the audit subject of its project and channel (core
// NATS; the event stream stores it). A record whose project or channel is
// not a subject token goes to project and channel "_".
func Publish(nc *nats.Conn, ver string, rec Record) error {
	if rec.Time.IsZero() {
		rec.Time = time.Now().UTC()
	}
	project, channel := rec.Project, rec.Channel
	if subjects.ValidateToken("project_id", project) != nil || subjects.ValidateToken("channel_id", channel) != nil {
		project, channel = "_", "_"
	}
	subj, err := subjects.Audit(ver, project, channel, rec.Service)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("audit: encode: %w", err)
	}
	if err := nc.Publish(subj.String(), body); err != nil {
		return fmt.Errorf("audit: publish %s: %w", subj, err)
	}
	return nil
}
