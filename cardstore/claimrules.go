package cardstore

import (
	"fmt"
	"time"
)

// The claim rules of ClaimRequest, Release, GetClaim and the tool-scoped
// writes, as decisions on the record a store keeps for a key, so that
// every store decides alike and keeps only the storing (its own
// transaction or compare-and-set around these calls).

// ClaimRecord is the state a store keeps for a claim key. A Released
// record (a tombstone) is no claim; it keeps the last fencing token so
// that the key's next claim gets a larger one.
type ClaimRecord struct {
	Holder    string    `json:"holder,omitempty"`
	Token     uint64    `json:"token"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	Released  bool      `json:"released,omitempty"`
	// Tool is the tool token (subjects.ToolToken) of a claim taken for a
	// tool (ClaimTool, StartCallTool); "" for a claim of the mesh core.
	Tool string `json:"tool,omitempty"`
	// Epoch is the boot epoch of the store run that wrote the record
	// (boltstore: its BootEpoch, for the lock-delay after a restart); 0
	// for stores without one.
	Epoch uint64 `json:"epoch,omitempty"`
}

// Live reports whether rec is a claim (not nil, not released).
func (rec *ClaimRecord) Live() bool { return rec != nil && !rec.Released }

// ClaimName names a key of a project in messages: `on key "k" in project p`.
func ClaimName(projectID, key string) string {
	return fmt.Sprintf("on key %q in project %s", key, projectID)
}

// CheckClaimKey validates the project and key every claim method takes.
func CheckClaimKey(projectID, key string) error {
	if err := CheckProject(projectID); err != nil {
		return err
	}
	return CheckClaimString("key", key)
}

// CheckRelease validates the arguments of Release.
func CheckRelease(projectID, key, holder string) error {
	if err := CheckClaimKey(projectID, key); err != nil {
		return err
	}
	return CheckClaimString("holder", holder)
}

// CheckClaim validates a ClaimRequest: project, key, holder and lease.
func CheckClaim(req ClaimRequest) error {
	if err := CheckRelease(req.ProjectID, req.Key, req.Holder); err != nil {
		return err
	}
	return CheckLease(req.Lease)
}

// NextClaim applies ClaimRequest's rules for tool ("" for the core) to
// the key's record rec (nil: never claimed) at the store's time now. It
// returns the claim to store and return, or: ErrForbidden when the holder
// holds the claim for another tool, a *ClaimHeldError when another live
// holder has it.
func NextClaim(rec *ClaimRecord, req ClaimRequest, tool string, now time.Time) (*Claim, error) {
	c := &Claim{ProjectID: req.ProjectID, Key: req.Key, Holder: req.Holder, ExpiresAt: now.Add(req.Lease)}
	switch {
	case rec == nil:
		c.Token = 1
	case rec.Released:
		c.Token = rec.Token + 1 // fencing tokens never go back
	case rec.Holder == req.Holder && rec.Tool != tool:
		return nil, fmt.Errorf("%w: the claim %s of holder %s was taken for tool %q, not %q", ErrForbidden, ClaimName(req.ProjectID, req.Key), req.Holder, rec.Tool, tool)
	case rec.Holder == req.Holder:
		c.Token = rec.Token // renewal (even of a lapsed lease nobody took)
	case now.Before(rec.ExpiresAt):
		return nil, fmt.Errorf("%w: key %q in project %s", &ClaimHeldError{Holder: rec.Holder, ExpiresAt: rec.ExpiresAt}, req.Key, req.ProjectID)
	default:
		c.Token, c.TakenOver, c.PreviousHolder = rec.Token+1, true, rec.Holder
	}
	return c, nil
}

// RecordOf is the record of the live claim c taken for tool.
func RecordOf(c *Claim, tool string) *ClaimRecord {
	return &ClaimRecord{Holder: c.Holder, Token: c.Token, ExpiresAt: c.ExpiresAt, Tool: tool}
}

// CheckReleasable applies Release's rules to the key's record rec: it
// fails with ErrClaimLost unless holder holds the claim (expired or not)
// and, with checkTool (ReleaseTool), with ErrForbidden when the claim was
// taken for another tool than tool.
func CheckReleasable(rec *ClaimRecord, projectID, key, holder, tool string, checkTool bool) error {
	name := ClaimName(projectID, key)
	switch {
	case !rec.Live():
		return fmt.Errorf("%w: %s has no claim %s", ErrClaimLost, holder, name)
	case checkTool && rec.Tool != tool:
		return fmt.Errorf("%w: the claim %s was taken for tool %q, not %q", ErrForbidden, name, rec.Tool, tool)
	case rec.Holder != holder:
		return fmt.Errorf("%w: the claim %s belongs to %s, not %s", ErrClaimLost, name, rec.Holder, holder)
	}
	return nil
}

// ClaimOf is GetClaim's answer from the key's record rec at the store's
// time now: the claim with Expired set, or ErrNotFound when rec is no
// claim.
func ClaimOf(rec *ClaimRecord, projectID, key string, now time.Time) (*Claim, error) {
	if !rec.Live() {
		return nil, fmt.Errorf("%w: no claim %s", ErrNotFound, ClaimName(projectID, key))
	}
	return &Claim{
		ProjectID: projectID, Key: key, Holder: rec.Holder, Token: rec.Token,
		ExpiresAt: rec.ExpiresAt, Expired: !now.Before(rec.ExpiresAt),
	}, nil
}

// CheckResultFence applies PutToolResult's claim rule to a new tool.result
// of the call k in the project, whose claim record is rec (nil: never
// claimed): the claim must be live, taken for tool, and held by holder
// with the fencing token token. A missing holder, no claim or a claim of
// another tool is ErrForbidden; the same tool's claim under another
// holder or token (taken over) is ErrClaimLost. A lapsed lease nobody took
// over still counts as held, as for a renewal.
func CheckResultFence(rec *ClaimRecord, projectID string, k CallKey, tool, holder string, token uint64) error {
	name := fmt.Sprintf("%q in project %s", k.String(), projectID)
	switch {
	case holder == "":
		return fmt.Errorf("%w: no claim given for the call %s: a worker writes a result only under the call's claim, naming its holder and fencing token",
			ErrForbidden, name)
	case !rec.Live():
		return fmt.Errorf("%w: the call %s has no claim: a worker writes a result only under the call's claim (claim it on svc.cardstore.claim.%s first)",
			ErrForbidden, name, tool)
	case rec.Tool != tool:
		return fmt.Errorf("%w: the call %s is claimed for tool %q, not %q", ErrForbidden, name, rec.Tool, tool)
	case rec.Holder != holder || rec.Token != token:
		return fmt.Errorf("%w: the result was written under the claim of %s with token %d, but the call %s is now held by %s with token %d",
			ErrClaimLost, holder, token, name, rec.Holder, rec.Token)
	}
	return nil
}
