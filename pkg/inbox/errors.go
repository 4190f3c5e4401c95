package inbox

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error of the inbox packages that is about the
// request (rather than the transport) matches one of them with errors.Is,
// on both sides of NATS: natsinbox.Client maps wire codes back through
// Codes. The backends' own errors (a locked file, an unreadable schema)
// are defined by the backend packages.
var (
	// ErrNotFound: no entry with this inbox_id exists in the project asked
	// for. An entry of another project is also "not found".
	ErrNotFound = errors.New("inbox: not found")
	// ErrInvalid: the request breaks a rule (a missing or malformed field,
	// an unknown state, a negative epoch). The message names what is wrong.
	ErrInvalid = errors.New("inbox: invalid request")
	// ErrClosed: the service (or its backend) has been stopped.
	ErrClosed = errors.New("inbox: closed")
	// ErrRefused: the report can never be accepted (no such tool.result
	// card, a card of another call or with another status, a malformed
	// body). Its dead-letter record is already published; sending it again
	// changes nothing.
	ErrRefused = errors.New("inbox: report refused")
	// ErrPending: DeleteTurn found a pending entry in the turn (a result
	// its agent has not consumed yet) and removed nothing.
	ErrPending = errors.New("inbox: turn has a pending entry")
	// ErrForbidden: an agent-scoped request (svc.inbox.<op>.<agent>) for
	// something that is not that agent's: another agent's entries or turn.
	ErrForbidden = errors.New("inbox: forbidden")
)

// Limits.
const (
	// MaxList is the default and largest number of entries one List returns.
	MaxList = 1000
	// MaxAck is the most inbox ids one Ack takes.
	MaxAck = 1000
	// MaxDeadLetterBody is how much of a refused report's body a dead-letter
	// record keeps.
	MaxDeadLetterBody = 4096
)

// NotFound returns an error matching ErrNotFound that names the inbox ids
// with no entry in project (the first ten of them, then a count). Every
// backend reports unknown ids of an Ack with it.
func NotFound(project string, ids []string) error {
	return fmt.Errorf("%w: inbox entries not in project %s: %s", ErrNotFound, project, JoinIDs(ids))
}

// JoinIDs lists ids for a message or a log line: the first ten, comma
// separated, then how many more there are.
func JoinIDs(ids []string) string {
	const show = 10
	if len(ids) <= show {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s (and %d more)", strings.Join(ids[:show], ", "), len(ids)-show)
}
