package notes

import (
	"math"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// BM25 parameters (the usual defaults) and the weight of a title match.
const (
	bm25K1      = 1.2
	bm25B       = 0.75
	titleWeight = 2
	snippetLen  = 120
)

// Tokenize lower-cases s and splits it into letter/digit runs.
func Tokenize(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// Hit is one ranked note.
type Hit struct {
	Note  Note
	Score float64
}

// Rank scores notes against query with BM25 over the title (counted
// titleWeight times) and the content. Notes matching no query term are
// dropped; an empty query keeps every note with score 0. The order is
// deterministic: score descending, then updated_at descending, then id.
func Rank(notes []Note, query string) []Hit {
	terms := uniq(Tokenize(query))
	docs := make([][]string, len(notes))
	var totalLen float64
	df := map[string]int{}
	for i, n := range notes {
		toks := Tokenize(n.Content)
		for range titleWeight {
			toks = append(toks, Tokenize(n.Title)...)
		}
		docs[i] = toks
		totalLen += float64(len(toks))
		for _, t := range uniq(toks) {
			df[t]++
		}
	}
	avg := 1.0
	if len(notes) > 0 && totalLen > 0 {
		avg = totalLen / float64(len(notes))
	}
	var hits []Hit
	for i, n := range notes {
		if len(terms) == 0 {
			hits = append(hits, Hit{Note: n})
			continue
		}
		tf := map[string]int{}
		for _, t := range docs[i] {
			tf[t]++
		}
		score := 0.0
		for _, t := range terms {
			f := float64(tf[t])
			if f == 0 {
				continue
			}
			N, d := float64(len(notes)), float64(df[t])
			idf := math.Log(1 + (N-d+0.5)/(d+0.5))
			score += idf * f * (bm25K1 + 1) / (f + bm25K1*(1-bm25B+bm25B*float64(len(docs[i]))/avg))
		}
		if score > 0 {
			hits = append(hits, Hit{Note: n, Score: score})
		}
	}
	sort.SliceStable(hits, func(i, j int) bool {
		a, b := hits[i], hits[j]
		if a.Score != b.Score {
			return a.Score > b.Score
		}
		if a.Note.UpdatedAt != b.Note.UpdatedAt {
			return a.Note.UpdatedAt > b.Note.UpdatedAt
		}
		return a.Note.NoteID < b.Note.NoteID
	})
	return hits
}

// Relevance maps a BM25 score to (0, 1): score/(score+1), rounded to two
// decimals. It is monotonic, so it orders like the score, and a note's
// relevance does not depend on the other results shown.
func Relevance(score float64) float64 {
	if score <= 0 {
		return 0
	}
	return math.Round(score/(score+1)*100) / 100
}

func uniq(s []string) []string {
	seen := map[string]bool{}
	out := s[:0:0]
	for _, t := range s {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// Snippet returns about snippetLen characters of text around the first
// occurrence of a query term, with "..." where text was cut. With no match
// it returns the start of the text.
func Snippet(text, query string) string {
	text = strings.Join(strings.Fields(text), " ")
	lower := strings.ToLower(text)
	at := -1
	for _, t := range Tokenize(query) {
		if i := indexWord(lower, t); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	if at < 0 {
		at = 0
	}
	start := max(0, at-snippetLen/3)
	end := min(len(text), start+snippetLen)
	// Cut on rune boundaries.
	for start > 0 && !utf8.RuneStart(text[start]) {
		start--
	}
	for end < len(text) && !utf8.RuneStart(text[end]) {
		end++
	}
	s := text[start:end]
	if start > 0 {
		s = "..." + s
	}
	if end < len(text) {
		s += "..."
	}
	return s
}

// indexWord finds term in lower at a word start (ToLower keeps byte
// offsets for the text the tokenizer sees in practice; a mismatch only
// moves the snippet).
func indexWord(lower, term string) int {
	from := 0
	for {
		i := strings.Index(lower[from:], term)
		if i < 0 {
			return -1
		}
		i += from
		if i == 0 {
			return i
		}
		r, _ := utf8.DecodeLastRuneInString(lower[:i])
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			return i
		}
		from = i + len(term)
	}
}
