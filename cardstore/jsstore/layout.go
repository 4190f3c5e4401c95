package jsstore

import (
	"encoding/base64"
	"strings"
)

// The stream's key layout (see the package documentation). These are
// storage keys inside the store's own stream, like the bucket keys of
// boltstore: nothing but this package publishes or subscribes on them, and
// they are not UTP subjects (those live in package subjects).
//
//	<root>.c.<project>.<card_id>            canonical card JSON            put-if-absent
//	<root>.t.<project>.<turn>               {"ids":[…]}: one per turn and Put, in write order
//	<root>.s.<project>.<turn>               turn summary JSON              compare-and-set, rollup
//	<root>.l.<project>                      turn list: {"turns":[…],"prev":seq} one per Put that starts turns; compare-and-set
//	<root>.a.<project>.<agent>              the agent's turn list, same shape as l
//	<root>.r.<project>.<turn>.<call>        card id of the tool.result       put-if-absent
//	<root>.k.<project>.<key>                claim record (claimRecord)     compare-and-set, rollup
//	<root>.b.<project>.<box_id>             card.Box JSON                  compare-and-set, rollup
//
// <project> is the project id itself (a subject token by card.ValidateName)
// and <card_id> a canonical UUID; every other id becomes a token by tok.
const (
	kindCard     = "c"
	kindTurn     = "t"
	kindSummary  = "s"
	kindTurnList = "l"
	kindAgent    = "a"
	kindResult   = "r"
	kindClaim    = "k"
	kindBox      = "b"
)

// tok maps an arbitrary non-empty id to a subject token, unambiguously:
// base64url without padding uses only [A-Za-z0-9_-], so no id can produce
// a dot, a wildcard or white space, and two ids never share a token.
func tok(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

// layout builds the subjects of one stream.
type layout struct{ root string }

func (l layout) subj(kind string, parts ...string) string {
	var b strings.Builder
	b.WriteString(l.root)
	b.WriteByte('.')
	b.WriteString(kind)
	for _, p := range parts {
		b.WriteByte('.')
		b.WriteString(p)
	}
	return b.String()
}

func (l layout) card(project, id string) string   { return l.subj(kindCard, project, id) }
func (l layout) turn(project, turn string) string { return l.subj(kindTurn, project, tok(turn)) }
func (l layout) summary(project, turn string) string {
	return l.subj(kindSummary, project, tok(turn))
}
func (l layout) turnList(project string) string { return l.subj(kindTurnList, project) }
func (l layout) agentList(project, agent string) string {
	return l.subj(kindAgent, project, tok(agent))
}
func (l layout) result(project, turn, call string) string {
	return l.subj(kindResult, project, tok(turn), tok(call))
}
func (l layout) claim(project, key string) string { return l.subj(kindClaim, project, tok(key)) }
func (l layout) box(project, id string) string    { return l.subj(kindBox, project, tok(id)) }

// Cursor positions. A ListTurn position names one card id inside one turn
// index message, a ListTurns position one turn inside one list message:
// seq<<posBits | index. One message holds at most cardstore.MaxBatch
// entries, fewer than 1<<posBits, and stream sequences stay far below
// 1<<(64-posBits).
const posBits = 10

func pos(seq uint64, i int) uint64    { return seq<<posBits | uint64(i) }
func splitPos(p uint64) (uint64, int) { return p >> posBits, int(p & (1<<posBits - 1)) }
