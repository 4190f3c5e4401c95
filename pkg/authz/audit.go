package authz

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrAuditBody is returned by ParseAuditRecords for a body that is not
// one or more audit records, one JSON object per line.
var ErrAuditBody = errors.New("authz: bad audit message body")

// ParseAuditRecords decodes the body of a message on
// cg.<ver>.<project>.<channel>.evt.sys.authz.decision: one or more
// AuditRecords, one JSON object per line (newline-delimited JSON; a
// publisher may group the decisions of a short interval into one
// message). Empty lines are skipped; a body without any record, or with a
// line that is not a JSON object, fails with ErrAuditBody naming the line.
func ParseAuditRecords(body []byte) ([]AuditRecord, error) {
	var out []AuditRecord
	for n := 1; len(body) > 0; n++ {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if line[0] != '{' {
			return nil, fmt.Errorf("%w: line %d is not a JSON object", ErrAuditBody, n)
		}
		var r AuditRecord
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrAuditBody, n, err)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no record", ErrAuditBody)
	}
	return out, nil
}
