package toolkit

import (
	"encoding/json"
	"fmt"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// Bind decodes arguments into v. A mismatch (a field of the wrong type,
// arguments that are not an object) fails bad_request naming it:
// "arguments: json: cannot unmarshal string into Go struct field
// .limit of type int" — the message worker.Call.Bind gives, for arguments
// that are not a live call's (a confirmed call's stored arguments).
func Bind(args json.RawMessage, v any) error {
	if err := json.Unmarshal(args, v); err != nil {
		return BadRequest("arguments: %v", err)
	}
	return nil
}

// BadRequest returns a bad_request failure with a formatted message.
func BadRequest(format string, a ...any) error {
	return worker.Fail(card.CodeBadRequest, fmt.Sprintf(format, a...))
}
