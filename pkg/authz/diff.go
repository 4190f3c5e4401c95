package authz

import (
	"fmt"
	"strings"
)

// maxDiffCells bounds the line-diff table; beyond it DiffPolicies shows
// the changed middle as all removed, then all added.
const maxDiffCells = 4 << 20

// DiffPolicies returns a line diff of two policy texts: hunks headed
// "@@ stored line A, new line B @@", removed lines prefixed "- ", added
// "+ ", and up to two unchanged lines of context prefixed "  ". Identical
// texts give "".
func DiffPolicies(old, new string) string {
	if old == new {
		return ""
	}
	a, b := splitLines(old), splitLines(new)
	ops := diffLines(a, b)
	var out strings.Builder
	const ctxLines = 2
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start := max(i-ctxLines, 0)
		end := i
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*ctxLines {
				break
			}
			end = run
		}
		stop := min(end+ctxLines, len(ops))
		fmt.Fprintf(&out, "@@ stored line %d, new line %d @@\n", ops[start].a+1, ops[start].b+1)
		for _, op := range ops[start:stop] {
			out.WriteByte(op.kind)
			out.WriteByte(' ')
			out.WriteString(op.text)
			out.WriteByte('\n')
		}
		i = stop
	}
	return out.String()
}

type lineOp struct {
	kind byte // ' ', '-' or '+'
	text string
	// a and b are the 0-based line numbers in old and new where the op is.
	a, b int
}

func splitLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// diffLines is a longest-common-subsequence line diff after trimming the
// common prefix and suffix.
func diffLines(a, b []string) []lineOp {
	var ops []lineOp
	p := 0
	for p < len(a) && p < len(b) && a[p] == b[p] {
		ops = append(ops, lineOp{' ', a[p], p, p})
		p++
	}
	s := 0
	for s < len(a)-p && s < len(b)-p && a[len(a)-1-s] == b[len(b)-1-s] {
		s++
	}
	ma, mb := a[p:len(a)-s], b[p:len(b)-s]
	if len(ma)*len(mb) > maxDiffCells {
		for i, l := range ma {
			ops = append(ops, lineOp{'-', l, p + i, p})
		}
		for j, l := range mb {
			ops = append(ops, lineOp{'+', l, p + len(ma), p + j})
		}
	} else {
		// lcs[i][j] is the LCS length of ma[i:] and mb[j:].
		lcs := make([][]int32, len(ma)+1)
		for i := range lcs {
			lcs[i] = make([]int32, len(mb)+1)
		}
		for i := len(ma) - 1; i >= 0; i-- {
			for j := len(mb) - 1; j >= 0; j-- {
				if ma[i] == mb[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else {
					lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
				}
			}
		}
		i, j := 0, 0
		for i < len(ma) || j < len(mb) {
			switch {
			case i < len(ma) && j < len(mb) && ma[i] == mb[j]:
				ops = append(ops, lineOp{' ', ma[i], p + i, p + j})
				i, j = i+1, j+1
			case i < len(ma) && (j == len(mb) || lcs[i+1][j] >= lcs[i][j+1]):
				ops = append(ops, lineOp{'-', ma[i], p + i, p + j})
				i++
			default:
				ops = append(ops, lineOp{'+', mb[j], p + i, p + j})
				j++
			}
		}
	}
	for k := 0; k < s; k++ {
		ia, ib := len(a)-s+k, len(b)-s+k
		ops = append(ops, lineOp{' ', a[ia], ia, ib})
	}
	return ops
}
