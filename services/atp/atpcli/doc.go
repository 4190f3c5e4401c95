// Package atpcli is the ATP catalogue's contribution to the utpmesh command
// line (a pkg/cli contribution): the verbs `utpmesh atp …` (bookings,
// activities, the operator's booking tools) and `utpmesh hem …` (list,
// confirm and decline the operator-confirmed HEM tasks). cmd/utpmesh
// registers Verbs in its command table; their names, flags, output and exit
// codes are the CLI's (docs/operations.md, docs/catalogues/atp.md).
package atpcli
