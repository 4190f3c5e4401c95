package webui

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/turn"
)

// pageNames are the templates/<name>.html files; each is parsed with
// layout.html and fragments.html.
var pageNames = []string{"index", "turn", "outcome", "replay", "error", "escalations", "decision"}

var funcs = template.FuncMap{
	"clock": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000")
	},
	"dur": func(d time.Duration) string {
		switch {
		case d >= time.Second:
			return d.Round(time.Millisecond).String()
		case d >= time.Millisecond:
			return d.Round(10 * time.Microsecond).String()
		}
		return d.Round(time.Microsecond).String()
	},
	"pct":   func(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) + "%" },
	"minus": func(a, b int) int { return a - b },
}

func parsePages() (map[string]*template.Template, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/fragments.html")
	if err != nil {
		return nil, fmt.Errorf("webui: parse templates: %w", err)
	}
	out := map[string]*template.Template{}
	for _, n := range pageNames {
		t, err := template.Must(base.Clone()).ParseFS(templateFS, "templates/"+n+".html")
		if err != nil {
			return nil, fmt.Errorf("webui: parse template %s: %w", n, err)
		}
		out[n] = t
	}
	return out, nil
}

// page is what every page template gets.
type page struct {
	Title    string
	Project  string
	CSRF     string
	ReadOnly bool
	AgentID  string
	Live     bool
	Open     bool
	Data     any
}

func (s *Server) page(title string, data any) page {
	p := page{Title: title, Project: s.cfg.Project, CSRF: s.csrf, ReadOnly: s.cfg.Agent == nil, Live: s.hub != nil, Open: s.cfg.Open, Data: data}
	if s.cfg.Agent != nil {
		p.AgentID = s.cfg.Agent.AgentID()
	}
	return p
}

// render executes a page (or, with fragment set, one named fragment of
// it) into a buffer first, so a template error never sends half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name, fragment string, p page) {
	var b bytes.Buffer
	t := s.pages[name]
	var err error
	if fragment != "" {
		err = t.ExecuteTemplate(&b, fragment, p)
	} else {
		err = t.Execute(&b, p)
	}
	if err != nil {
		s.log.Error("webui: render", "page", name, "fragment", fragment, "err", err)
		http.Error(w, "webui: render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// fail renders the error page: what went wrong and what to do instead.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	s.render(w, r, status, "error", "", s.page(http.StatusText(status), msg))
}

// turnList is the data of the turn list.
type turnList struct {
	Turns  []cardstore.TurnInfo
	Before uint64
	Next   uint64
	Err    string
}

func (s *Server) listTurns(r *http.Request) (turnList, int, error) {
	var l turnList
	if v := r.URL.Query().Get("before"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return l, http.StatusBadRequest, fmt.Errorf("before=%q is not a cursor; use the 'older' link, or leave it out for the newest turns", v)
		}
		l.Before = n
	}
	res, err := s.cfg.Store.ListTurns(r.Context(), cardstore.ListTurnsRequest{ProjectID: s.cfg.Project, Before: l.Before, Limit: s.cfg.PageSize})
	if err != nil {
		l.Err = fmt.Sprintf("the turns of project %s could not be listed: %v (a turn can still be opened by its id)", s.cfg.Project, err)
		return l, http.StatusBadGateway, nil
	}
	l.Turns, l.Next = res.Turns, res.Next
	return l, http.StatusOK, nil
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	l, status, err := s.listTurns(r)
	if err != nil {
		s.fail(w, r, status, err.Error())
		return
	}
	s.render(w, r, status, "index", "", s.page("turns of "+s.cfg.Project, l))
}

func (s *Server) turnsFragment(w http.ResponseWriter, r *http.Request) {
	l, status, err := s.listTurns(r)
	if err != nil {
		s.fail(w, r, status, err.Error())
		return
	}
	s.render(w, r, status, "index", "turns", s.page("", l))
}

// openTurn redirects the "open a turn" form to the turn's page.
func (s *Server) openTurn(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("turn")
	if id == "" {
		s.fail(w, r, http.StatusBadRequest, "type a turn id (an agent_turn_id, e.g. turn-1) into the box")
		return
	}
	http.Redirect(w, r, "/turns/"+url.PathEscape(id), http.StatusSeeOther)
}

// loadTurn reads a turn; on failure it has written the error page.
func (s *Server) loadTurn(w http.ResponseWriter, r *http.Request, id string) (*turn.Turn, bool) {
	t, err := turn.Load(r.Context(), s.cfg.Store, s.cfg.Project, id)
	switch {
	case err == nil:
		return t, true
	case errors.Is(err, turn.ErrInvalid):
		s.fail(w, r, http.StatusBadRequest, err.Error())
	case errors.Is(err, turn.ErrNotFound):
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("%v (is the project right? this UI shows project %s; start it with --project P for another)", err, s.cfg.Project))
	default:
		s.fail(w, r, http.StatusBadGateway, err.Error())
	}
	return nil, false
}

func (s *Server) turnPage(w http.ResponseWriter, r *http.Request) {
	t, ok := s.loadTurn(w, r, r.PathValue("turn"))
	if !ok {
		return
	}
	s.render(w, r, http.StatusOK, "turn", "", s.page("turn "+t.AgentTurnID, layout(t, s.cfg.Now())))
}

func (s *Server) turnFragment(w http.ResponseWriter, r *http.Request) {
	t, ok := s.loadTurn(w, r, r.PathValue("turn"))
	if !ok {
		return
	}
	s.render(w, r, http.StatusOK, "turn", "timeline", s.page("", layout(t, s.cfg.Now())))
}

// newTurnID is the agent_turn_id of a call the UI makes.
func newTurnID() string { return "ui-" + card.NewID() }
