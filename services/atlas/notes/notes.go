// Package notes is the atlas.notes service: NOTE_CREATE, NOTE_SEARCH,
// NOTE_GET and NOTE_DELETE over notes kept in the group's state
// (<DataDir>/atlas-notes.db, or the shared KV bucket atlas_notes).
//
// NOTE_SEARCH ranks with BM25 (k1 1.2, b 0.75) over each note's content and
// its title counted twice; relevance is score/(score+1) rounded to two
// decimals, and ties are broken by updated_at (newest first) and note_id,
// so the order is deterministic. Snippets show about 120 characters around
// the first query term. Search scans every note of the project: it suits
// personal-scale collections (thousands of notes), not a corpus.
//
// Undo steps: NOTE_CREATE → NOTE_DELETE; NOTE_DELETE → NOTE_CREATE with the
// deleted note's fields (new id). All tools are LOW risk.
package notes

import (
	"encoding/json"
	"slices"

	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/internal/kit"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// Tool names.
const (
	ToolCreate = "NOTE_CREATE"
	ToolSearch = "NOTE_SEARCH"
	ToolGet    = "NOTE_GET"
	ToolDelete = "NOTE_DELETE"
)

const bucketNotes = "notes"

// Note is one note.
type Note struct {
	NoteID    string   `json:"note_id"`
	Title     string   `json:"title"`
	Content   string   `json:"content"`
	Tags      []string `json:"tags"`
	CreatedAt string   `json:"created_at"`
	UpdatedAt string   `json:"updated_at"`
}

const tagsSchema = `{"type":"array","maxItems":32,"uniqueItems":true,"items":{"type":"string","minLength":1,"maxLength":64}}`

var (
	createParams = `{"type":"object","additionalProperties":false,"required":["title"],"properties":{
	"title":{"type":"string","minLength":1,"maxLength":500},
	"content":{"type":"string","maxLength":200000},"tags":` + tagsSchema + `}}`
	searchParams = `{"type":"object","additionalProperties":false,"properties":{
	"query":{"type":"string","maxLength":1000},"tags":` + tagsSchema + `,
	"limit":{"type":"integer","minimum":1,"maximum":100}}}`
	idParams = `{"type":"object","additionalProperties":false,"required":["note_id"],"properties":{"note_id":{"type":"string","minLength":1}}}`
)

// Service is the running atlas.notes service.
type Service struct {
	*kit.Service
	tools []worker.Tool
}

// Open opens the service's data file and builds its tools.
func Open(deps atlas.Deps) (*Service, error) {
	ks, err := kit.New(atlas.GroupNotes, deps)
	if err != nil {
		return nil, err
	}
	tools, err := ks.Tools(
		kit.Spec{Name: ToolCreate, Description: "Creates a note (title, markdown content, tags). Returns note_id and created_at; undo is NOTE_DELETE.", Params: createParams, Risk: registry.RiskLow, Run: create},
		kit.Spec{Name: ToolSearch, Description: "Searches notes by query (BM25 relevance, snippet around the match) and tags (all must match). Returns notes and total.", Params: searchParams, Risk: registry.RiskLow, ReadOnly: true, Run: search},
		kit.Spec{Name: ToolGet, Description: "Returns a whole note by note_id.", Params: idParams, Risk: registry.RiskLow, ReadOnly: true, Run: get},
		kit.Spec{Name: ToolDelete, Description: "Deletes a note (the undo of NOTE_CREATE). Returns deleted_data.", Params: idParams, Risk: registry.RiskLow, Run: remove},
	)
	if err != nil {
		_ = ks.Close()
		return nil, err
	}
	return &Service{Service: ks, tools: tools}, nil
}

// Tools are the service's worker tools.
func (s *Service) Tools() []worker.Tool { return s.tools }

// Build is the catalogue factory.
func Build(deps atlas.Deps) ([]worker.Tool, error) { return kit.Build(Open, deps) }

func create(x *kit.Exec) (kit.Outcome, error) {
	var a struct {
		Title   string   `json:"title"`
		Content string   `json:"content"`
		Tags    []string `json:"tags"`
	}
	if err := x.Bind(&a); err != nil {
		return kit.Outcome{}, err
	}
	if a.Tags == nil {
		a.Tags = []string{}
	}
	n := Note{NoteID: x.ID("note", 0), Title: a.Title, Content: a.Content, Tags: a.Tags, CreatedAt: x.Now(), UpdatedAt: x.Now()}
	b := x.Bucket(bucketNotes)
	if _, err := toolkit.PutNew(b, n.NoteID, n, x.ToolCallID); err != nil {
		return kit.Outcome{}, err
	}
	return kit.Outcome{
		Result:  map[string]any{"note_id": n.NoteID, "created_at": n.CreatedAt},
		Undo:    &receipts.Undo{ToolName: ToolDelete, Args: toolkit.Raw(map[string]string{"note_id": n.NoteID})},
		Changes: []receipts.Change{{Op: "create", Kind: "note", ID: n.NoteID, After: toolkit.Raw(n)}},
	}, nil
}

// SearchHit is one note of a NOTE_SEARCH result.
type SearchHit struct {
	NoteID    string   `json:"note_id"`
	Title     string   `json:"title"`
	Snippet   string   `json:"snippet"`
	Relevance float64  `json:"relevance"`
	Tags      []string `json:"tags"`
}

func search(x *kit.Exec) (kit.Outcome, error) {
	var a struct {
		Query string   `json:"query"`
		Tags  []string `json:"tags"`
		Limit int      `json:"limit"`
	}
	if err := x.Bind(&a); err != nil {
		return kit.Outcome{}, err
	}
	if a.Limit == 0 {
		a.Limit = 20
	}
	var all []Note
	b := x.Bucket(bucketNotes)
	{
		if err := b.Scan("", false, func(_ string, v []byte) error {
			var n Note
			if err := json.Unmarshal(v, &n); err != nil {
				return err
			}
			for _, t := range a.Tags {
				if !slices.Contains(n.Tags, t) {
					return nil
				}
			}
			all = append(all, n)
			return nil
		}); err != nil {
			return kit.Outcome{}, err
		}
	}
	hits := Rank(all, a.Query)
	out := []SearchHit{}
	for i, h := range hits {
		if i == a.Limit {
			break
		}
		out = append(out, SearchHit{NoteID: h.Note.NoteID, Title: h.Note.Title, Snippet: Snippet(h.Note.Content, a.Query),
			Relevance: Relevance(h.Score), Tags: h.Note.Tags})
	}
	return kit.Outcome{Result: map[string]any{"notes": out, "total": len(hits)}}, nil
}

func load(x *kit.Exec) (Note, error) {
	var a struct {
		NoteID string `json:"note_id"`
	}
	var n Note
	if err := x.Bind(&a); err != nil {
		return n, err
	}
	b := x.Bucket(bucketNotes)
	found, err := toolkit.GetJSON(b, a.NoteID, &n)
	if err != nil {
		return n, err
	}
	if !found {
		return n, toolkit.BadRequest("note_id %q: no such note in project %s (NOTE_SEARCH shows the note ids)", a.NoteID, x.Project)
	}
	return n, nil
}

func get(x *kit.Exec) (kit.Outcome, error) {
	n, err := load(x)
	if err != nil {
		return kit.Outcome{}, err
	}
	return kit.Outcome{Result: n}, nil
}

func remove(x *kit.Exec) (kit.Outcome, error) {
	n, err := load(x)
	if err != nil {
		return kit.Outcome{}, err
	}
	b := x.Bucket(bucketNotes)
	if err := b.Delete(n.NoteID); err != nil {
		return kit.Outcome{}, err
	}
	return kit.Outcome{
		Result:  map[string]any{"note_id": n.NoteID, "deleted": true, "deleted_data": n},
		Undo:    &receipts.Undo{ToolName: ToolCreate, Args: toolkit.Raw(map[string]any{"title": n.Title, "content": n.Content, "tags": n.Tags})},
		Changes: []receipts.Change{{Op: "delete", Kind: "note", ID: n.NoteID, Before: toolkit.Raw(n)}},
	}, nil
}
