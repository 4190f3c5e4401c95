package natsstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/audit"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// ServerConfig configures a Server: the options every mesh service's
// server takes (svc.ServerConfig). Concurrency defaults to 256, so that
// concurrent writers reach the store's group commit together; Identities
// is not used (the CardStore has no signed writes).
type ServerConfig = svc.ServerConfig

// Server serves a cardstore.Store on cg.<ver>.*.*.svc.cardstore.<op>, its
// tool-scoped writes on cg.<ver>.*.*.svc.cardstore.<op>.<tool> and its
// agent-scoped operations (AgentOps) on cg.<ver>.*.*.svc.cardstore.<op>.<agent>.
type Server struct {
	store cardstore.Store
	srv   *svc.Server
	log   *slog.Logger
}

// NewServer starts serving store on nc.
func NewServer(nc *nats.Conn, store cardstore.Store, cfg ServerConfig) (*Server, error) {
	if store == nil {
		return nil, errors.New("natsstore: nil store")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 256
	}
	srv, err := svc.NewServer(nc, cfg.Config(ServiceName, Codes))
	if err != nil {
		return nil, err
	}
	s := &Server{store: store, srv: srv, log: srv.Logger()}
	err = srv.Serve(map[string]svc.HandlerFunc{
		OpPut: s.put, OpPutResult: s.putResult, OpGet: s.get, OpGetMany: s.getMany, OpListTurn: s.listTurn,
		OpFindResult: s.findResult, OpBoxCreate: s.boxCreate, OpBoxAppend: s.boxAppend,
		OpBoxGet: s.boxGet, OpClaim: s.claim, OpRelease: s.release,
		OpListTurns: s.listTurns, OpGetClaim: s.getClaim, OpDeleteTurn: s.deleteTurn,
		OpClaimKey: notToolCall(s.claim), OpReleaseKey: notToolCall(s.release),
	}, s.toolOps().serve)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Subject returns the subject pattern the server listens on.
func (s *Server) Subject() string { return s.srv.Subject() }

// Stop stops serving and waits for requests in flight until ctx ends. It
// does not close the store.
func (s *Server) Stop(ctx context.Context) error {
	return s.srv.Stop(ctx)
}

func (s *Server) put(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	return s.putCards(ctx, sc, data, false)
}

func (s *Server) putResult(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	return s.putCards(ctx, sc, data, true)
}

// putCards serves put and put_result: only put_result takes tool.result
// cards, so a NATS permission on put_result decides who may write results.
func (s *Server) putCards(ctx context.Context, sc svc.Scope, data []byte, results bool) (any, error) {
	var req putRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if err := checkCards(req.Cards, sc.Project); err != nil {
		return nil, err
	}
	if !results {
		if err := s.refuseResults(sc, req.Cards); err != nil {
			return nil, err
		}
	}
	if ep, ok := s.store.(cardstore.EntryPutter); ok && results {
		entry, err := ep.PutWithEntry(ctx, req.Cards...)
		if err != nil {
			return nil, err
		}
		return putReply{Count: len(req.Cards), InboxEntry: entry}, nil
	}
	if err := s.store.Put(ctx, req.Cards...); err != nil {
		return nil, err
	}
	return putReply{Count: len(req.Cards)}, nil
}

// refuseResults refuses (ErrWrongOp, audited) a put holding a tool.result
// card: results are written with put_result.
func (s *Server) refuseResults(sc svc.Scope, cards []*card.Card) error {
	for i, c := range cards {
		if c.Type != card.TypeToolResult {
			continue
		}
		s.log.Warn("cardstore: tool.result card refused on put", "project_id", sc.Project, "card_id", c.CardID, "tool_call_id", c.ToolCallID)
		err := fmt.Errorf("%w: cards[%d] (%s) is a tool.result: results are written with %s, which only workers and the mesh core may use", ErrWrongOp, i, c.CardID, OpPutResult)
		subj, _ := subjects.Service(sc.Version, sc.Project, sc.Channel, ServiceName, OpPut)
		s.srv.Audit(audit.Record{Service: ServiceName, Op: OpPut, Project: sc.Project, Channel: sc.Channel,
			Actor: "unverified:any identity that may use svc.cardstore.put of project " + sc.Project + " (its agents, workers, core, admin)",
			Code:  CodeWrongOp, Reason: err.Error(), Subject: subj.String(),
			Detail: map[string]string{"card_id": c.CardID, "tool_call_id": c.ToolCallID, "agent_turn_id": c.Metadata.AgentTurnID}})
		return err
	}
	return nil
}

func (s *Server) get(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req getRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if js, ok := s.store.(cardJSONGetter); ok {
		// The card as stored: no decoding and re-encoding.
		body, err := js.GetJSON(ctx, sc.Project, req.CardID, append(make([]byte, 0, 1024), cardHead...))
		if err != nil {
			return nil, err
		}
		return svc.Encoded(append(body, '}')), nil
	}
	c, err := s.store.Get(ctx, sc.Project, req.CardID)
	if err != nil {
		return nil, err
	}
	return cardReply{Card: c}, nil
}

// cardJSONGetter is a store that hands out a card as its stored JSON
// encoding (cardstore/boltstore).
type cardJSONGetter interface {
	GetJSON(ctx context.Context, projectID, cardID string, dst []byte) ([]byte, error)
}

// cardHead starts a get reply as the server writes it (and the client's
// fast decoder expects it): {"card":<card>}.
const cardHead = `{"card":`

func (s *Server) getMany(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req getManyRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	return s.store.GetMany(ctx, sc.Project, req.CardIDs)
}

func (s *Server) listTurn(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req listTurnRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	lr := cardstore.ListTurnRequest{ProjectID: sc.Project, AgentTurnID: req.AgentTurnID, After: req.After, Limit: req.Limit}
	if js, ok := s.store.(turnJSONLister); ok {
		// The page as stored: no decoding and re-encoding of every card.
		body, next, err := js.ListTurnJSON(ctx, lr, append(make([]byte, 0, 64<<10), pageHead...))
		if err != nil {
			return nil, err
		}
		if next != 0 {
			body = strconv.AppendUint(append(body, pageNext...), next, 10)
		}
		return svc.Encoded(append(body, '}')), nil
	}
	res, err := s.store.ListTurn(ctx, lr)
	if err == nil && res.Cards == nil {
		res.Cards = []*card.Card{} // an array, never null
	}
	return res, err
}

// turnJSONLister is a store that hands out a ListTurn page as the JSON
// array of its cards' stored encodings (cardstore/boltstore).
type turnJSONLister interface {
	ListTurnJSON(ctx context.Context, req cardstore.ListTurnRequest, dst []byte) ([]byte, uint64, error)
}

// The parts of a list_turn reply around its cards, as the server writes
// them (and the client's fast decoder expects them).
const (
	pageHead = `{"cards":`
	pageNext = `,"next":`
)

func (s *Server) listTurns(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req listTurnsRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	return s.store.ListTurns(ctx, cardstore.ListTurnsRequest{
		ProjectID: sc.Project, AgentID: req.AgentID, Before: req.Before, Limit: req.Limit,
	})
}

func (s *Server) findResult(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req findResultRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	c, err := s.store.FindToolResult(ctx, sc.Project, req.AgentTurnID, req.ToolCallID)
	if err != nil {
		return nil, err
	}
	return cardReply{Card: c}, nil
}

func (s *Server) boxCreate(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req boxRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	b, err := s.store.CreateBox(ctx, sc.Project, req.BoxID, req.CardIDs)
	if err != nil {
		return nil, err
	}
	return boxReply{Box: b}, nil
}

func (s *Server) boxAppend(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req boxRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	b, err := s.store.AppendBox(ctx, sc.Project, req.BoxID, req.CardIDs)
	if err != nil {
		return nil, err
	}
	return boxReply{Box: b}, nil
}

func (s *Server) boxGet(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req boxRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	b, err := s.store.GetBox(ctx, sc.Project, req.BoxID)
	if err != nil {
		return nil, err
	}
	return boxReply{Box: b}, nil
}

func (s *Server) claim(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req claimRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	c, err := s.store.Claim(ctx, cardstore.ClaimRequest{
		ProjectID: sc.Project, Key: req.Key, Holder: req.Holder,
		Lease: time.Duration(req.LeaseMS) * time.Millisecond,
	})
	var held *cardstore.ClaimHeldError
	if errors.As(err, &held) {
		return nil, svc.WithDetail(err, claimHeldDetail{Holder: held.Holder, ExpiresAt: held.ExpiresAt})
	}
	if err != nil {
		return nil, err
	}
	return claimReply{Claim: c}, nil
}

func (s *Server) release(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req claimRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if err := s.store.Release(ctx, sc.Project, req.Key, req.Holder); err != nil {
		return nil, err
	}
	return emptyReply{}, nil
}

func (s *Server) getClaim(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req getClaimRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	c, err := s.store.GetClaim(ctx, sc.Project, req.Key)
	if err != nil {
		return nil, err
	}
	return claimReply{Claim: c}, nil
}

func (s *Server) deleteTurn(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req deleteTurnRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	n, err := s.store.DeleteTurn(ctx, sc.Project, req.AgentTurnID)
	if err != nil {
		return nil, err
	}
	s.log.Info("cardstore: turn deleted", "project_id", sc.Project, "agent_turn_id", req.AgentTurnID, "cards", n)
	return deleteTurnReply{Deleted: n}, nil
}
