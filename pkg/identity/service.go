package identity

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/internal/audit"
	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// Codes maps the service's sentinels to wire codes and back.
var Codes = svc.Codes{
	{Err: ErrInvalid, Code: svc.CodeBadRequest},
	{Err: ErrExists, Code: svc.CodeConflict},
	{Err: ErrNotFound, Code: svc.CodeNotFound},
}

// Mesh is what the service needs of the mesh: every identity it admits
// now (to refuse a name or a tool that is taken) and a reload of the
// server's users after the list changed. pkg/mesh implements it.
type Mesh interface {
	// Identities returns every identity the server admits, added ones
	// included.
	Identities() []meshauth.Identity
	// ReloadIdentities rebuilds the server's users (live reload).
	ReloadIdentities() error
}

// Request and reply bodies.
type (
	// AddRequest is add's body: the identity, with its public key.
	AddRequest struct {
		Identity meshauth.Identity `json:"identity"`
	}
	// RemoveRequest is remove's body.
	RemoveRequest struct {
		Name string `json:"name"`
	}
	// ListReply is list's reply (and add's and remove's: the list after).
	ListReply struct {
		Identities []Entry `json:"identities"`
	}
	// Entry is one identity as listed: its name, whether it was added
	// (and may be removed), and its fields.
	Entry struct {
		Name  string            `json:"name"`
		Added bool              `json:"added"`
		ID    meshauth.Identity `json:"identity"`
	}
)

// Server serves the identity operations.
type Server struct {
	srv  *svc.Server
	st   *Store
	mesh Mesh
}

// NewServer starts serving st on nc; mesh admits the changes.
func NewServer(nc *nats.Conn, st *Store, mesh Mesh, cfg svc.ServerConfig) (*Server, error) {
	if st == nil || mesh == nil {
		return nil, fmt.Errorf("identity: NewServer needs a store and a mesh")
	}
	srv, err := svc.NewServer(nc, cfg.Config(ServiceName, Codes))
	if err != nil {
		return nil, err
	}
	s := &Server{srv: srv, st: st, mesh: mesh}
	if err := srv.Serve(map[string]svc.HandlerFunc{OpList: s.list, OpAdd: s.add, OpRemove: s.remove}, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// Stop stops serving.
func (s *Server) Stop(ctx context.Context) error { return s.srv.Stop(ctx) }

func (s *Server) list(context.Context, svc.Scope, []byte) (any, error) { return s.reply(), nil }

func (s *Server) reply() ListReply {
	added := map[string]bool{}
	for _, id := range s.st.List() {
		added[id.Name()] = true
	}
	out := ListReply{Identities: []Entry{}}
	for _, id := range s.mesh.Identities() {
		out.Identities = append(out.Identities, Entry{Name: id.Name(), Added: added[id.Name()], ID: id})
	}
	slices.SortFunc(out.Identities, func(a, b Entry) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

func (s *Server) add(_ context.Context, sc svc.Scope, data []byte) (any, error) {
	var req AddRequest
	if err := svc.Decode(data, &req); err != nil {
		return nil, err
	}
	id := req.Identity
	if err := check(id); err != nil {
		s.audit(sc, OpAdd, id.Name(), err)
		return nil, err
	}
	for _, have := range s.mesh.Identities() {
		if err := conflict(have, id); err != nil {
			s.audit(sc, OpAdd, id.Name(), err)
			return nil, err
		}
	}
	if err := s.st.Add(id); err != nil {
		return nil, err
	}
	if err := s.mesh.ReloadIdentities(); err != nil {
		_, _ = s.st.Remove(id.Name())
		return nil, fmt.Errorf("identity: admit %s: %w", id.Name(), err)
	}
	s.audit(sc, OpAdd, id.Name(), nil)
	return s.reply(), nil
}

func (s *Server) remove(_ context.Context, sc svc.Scope, data []byte) (any, error) {
	var req RemoveRequest
	if err := svc.Decode(data, &req); err != nil {
		return nil, err
	}
	gone, err := s.st.Remove(req.Name)
	if err != nil {
		return nil, err
	}
	if err := s.mesh.ReloadIdentities(); err != nil {
		_ = s.st.Add(gone)
		return nil, fmt.Errorf("identity: drop %s: %w", req.Name, err)
	}
	s.audit(sc, OpRemove, req.Name, nil)
	return s.reply(), nil
}

// check refuses what add cannot admit.
func check(id meshauth.Identity) error {
	switch {
	case id.Role != meshauth.RoleWorker && !(id.Role == meshauth.RoleAgent && id.Agent != ""):
		return fmt.Errorf("%w: role %q: add a worker (utpmesh identity add worker SERVICE --tools T1,T2) or one agent (utpmesh identity add agent PROJECT/AGENT); core, admin, operator and project agents are made by utpmesh up", ErrInvalid, id.Role)
	case id.Key == "":
		return fmt.Errorf("%w: %s has no public key (the CLI sends the public nkey of the seed it makes)", ErrInvalid, id.Name())
	case len(id.Publish) > 0 || len(id.Subscribe) > 0 || id.RawCommands:
		return fmt.Errorf("%w: %s: extra subjects and raw commands are not added over the wire (a catalogue service's come from utpmesh up; raw commands from the project's configuration)", ErrInvalid, id.Name())
	}
	if err := id.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// conflict refuses a name, key or tool that have already has.
func conflict(have, id meshauth.Identity) error {
	if have.Name() == id.Name() {
		return fmt.Errorf("%w: %s (utpmesh identity list shows it)", ErrExists, id.Name())
	}
	if have.Key != "" && have.Key == id.Key {
		return fmt.Errorf("%w: key %s is %s's (make a new seed for each identity)", ErrExists, id.Key, have.Name())
	}
	for _, t := range id.Tools {
		for _, h := range have.Tools {
			if t.Name == h.Name || t.Target == h.Target {
				return fmt.Errorf("%w: tool %s is served by %s already (a tool has one worker identity)", ErrExists, t.Name, have.Name())
			}
		}
	}
	return nil
}

// audit records an identity change or a refused one.
func (s *Server) audit(sc svc.Scope, op, name string, err error) {
	rec := audit.Record{Service: ServiceName, Op: op, Project: sc.Project, Channel: sc.Channel, Allowed: err == nil,
		Actor: "unverified:core, admin or operator (the identities that may publish svc.identity.*)", Detail: map[string]string{"identity": name}}
	if err != nil {
		rec.Code, rec.Reason = svc.CodeOf(Codes, err), err.Error()
	}
	if subj, e := svc.Subject(sc.Version, sc.Project, sc.Channel, ServiceName, op); e == nil {
		rec.Subject = subj
	}
	s.srv.Audit(rec)
}
