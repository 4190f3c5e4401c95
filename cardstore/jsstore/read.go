package jsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/utpmesh/utpmesh/internal/parallel"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/deadline"
)

// msg is one stored message as the store reads it.
type msg struct {
	seq     uint64
	subject string
	data    []byte
}

// Status headers of replies without a message (nats.go keeps its names
// of them unexported).
const (
	hdrStatus      = "Status"
	hdrDescription = "Description"
)

// The JetStream API subjects the reads use.
const (
	apiDirectGet = "$JS.API.DIRECT.GET."     // + stream [+ "." + subject]
	apiMsgGet    = "$JS.API.STREAM.MSG.GET." // + stream
)

// directReq is a direct get request (ADR-31); only the fields the store
// uses.
type directReq struct {
	Seq       uint64   `json:"seq,omitempty"`
	MaxBytes  int      `json:"max_bytes,omitempty"`
	NextFor   string   `json:"next_by_subj,omitempty"`
	Batch     int      `json:"batch,omitempty"`
	MultiLast []string `json:"multi_last,omitempty"`
}

// readLast returns the last message on subject, or nil when there is none.
//
// On a single-replica stream every read is a direct get: the one server
// has every acknowledged write. On a replicated stream direct gets may be
// answered by a follower that lags behind the leader, so:
//   - mutable records (summaries, claims, boxes, list heads) are read from
//     the leader (STREAM.MSG.GET), which has applied every acknowledged
//     write;
//   - immutable records (cards, results, index messages) are read directly,
//     and only a "not found" is confirmed at the leader: a record that a
//     follower has is never stale.
func (s *Store) readLast(ctx context.Context, subject string, mutable bool) (*msg, error) {
	if s.leaderReads && mutable {
		return s.leaderGet(ctx, map[string]any{"last_by_subj": subject})
	}
	m, err := s.directLast(ctx, subject)
	if err != nil || m != nil || !s.leaderReads {
		return m, err
	}
	return s.leaderGet(ctx, map[string]any{"last_by_subj": subject})
}

// readSeq returns the message with sequence seq, or nil when there is none.
// It is used for immutable records only.
func (s *Store) readSeq(ctx context.Context, seq uint64) (*msg, error) {
	ms, _, err := s.direct(ctx, directReq{Seq: seq})
	if err != nil {
		return nil, err
	}
	if len(ms) > 0 && ms[0].seq == seq {
		return ms[0], nil
	}
	if !s.leaderReads {
		return nil, nil
	}
	return s.leaderGet(ctx, map[string]any{"seq": seq})
}

// directLast is a direct get of the last message on subject.
func (s *Store) directLast(ctx context.Context, subject string) (*msg, error) {
	ctx, cancel := s.reqCtx(ctx)
	defer cancel()
	reply, err := s.request(ctx, apiDirectGet+s.cfg.Stream+"."+subject, nil)
	if err != nil {
		return nil, s.requestErr(err)
	}
	m, _, err := s.parseDirect(reply)
	return m, err
}

// parseDirect reads one direct get reply: a message, or a status. It
// returns (nil, true, nil) for the end of a batch or "not found".
func (s *Store) parseDirect(reply *nats.Msg) (*msg, bool, error) {
	switch st := reply.Header.Get(hdrStatus); st {
	case "":
	case "404", "204":
		return nil, true, nil
	default:
		return nil, true, fmt.Errorf("jsstore: direct get from stream %s: status %s %s", s.cfg.Stream, st, reply.Header.Get(hdrDescription))
	}
	seq, err := strconv.ParseUint(reply.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil {
		return nil, false, fmt.Errorf("jsstore: direct get from stream %s: reply without a valid Nats-Sequence header: %w", s.cfg.Stream, err)
	}
	return &msg{seq: seq, subject: reply.Header.Get("Nats-Subject"), data: reply.Data}, false, nil
}

// direct runs a direct get that may answer with several messages (batch,
// multi_last) and collects them up to the end-of-batch marker.
//
// pending is the end-of-batch marker's Nats-Num-Pending: how many more
// messages matched but were not sent (the reply is cut at the server's
// byte limit).
func (s *Store) direct(ctx context.Context, req directReq) (out []*msg, pending uint64, err error) {
	ctx, cancel := s.reqCtx(ctx)
	defer cancel()
	single := req.Batch == 0 && len(req.MultiLast) == 0
	if !single {
		req.MaxBytes = maxReplyBytes
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, 0, fmt.Errorf("jsstore: encode direct get: %w", err)
	}
	if single {
		reply, err := s.request(ctx, apiDirectGet+s.cfg.Stream, body)
		if err != nil {
			return nil, 0, s.requestErr(err)
		}
		m, _, err := s.parseDirect(reply)
		if err != nil || m == nil {
			return nil, 0, err
		}
		return []*msg{m}, 0, nil
	}
	first := time.Now()
	for attempt := 0; ; attempt++ {
		actx, cancel := deadline.Within(ctx, s.cfg.AttemptTimeout)
		out, pending, err := s.batchGet(actx, body)
		lost := err != nil && errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		cancel()
		if lost {
			continue // unanswered: a read, sent again (resend.go)
		}
		if errors.Is(err, nats.ErrNoResponders) {
			// No stream answered (yet): see request.
			again, werr := s.askAgain(ctx, first, attempt)
			if werr != nil {
				return nil, 0, werr
			}
			if again {
				continue
			}
		}
		if err != nil {
			return nil, 0, s.requestErr(err)
		}
		return out, pending, nil
	}
}

// batchGet sends one batched direct get and collects its replies. No
// responders comes back as nats.ErrNoResponders, other request failures
// unmapped.
func (s *Store) batchGet(ctx context.Context, body []byte) (out []*msg, pending uint64, err error) {
	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, 0, fmt.Errorf("jsstore: direct get: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.nc.PublishRequest(apiDirectGet+s.cfg.Stream, inbox, body); err != nil {
		return nil, 0, fmt.Errorf("jsstore: direct get: %w", err)
	}
	for {
		reply, err := deadline.NextMsg(ctx, sub)
		if err != nil {
			return nil, 0, err
		}
		if st := reply.Header.Get(hdrStatus); st == "503" {
			return nil, 0, nats.ErrNoResponders
		}
		m, end, err := s.parseDirect(reply)
		if err != nil {
			return nil, 0, err
		}
		if end {
			if np := reply.Header.Get("Nats-Num-Pending"); np != "" {
				pending, _ = strconv.ParseUint(np, 10, 64)
			}
			return out, pending, nil
		}
		out = append(out, m)
	}
}

// storedMsg is STREAM.MSG.GET's message.
type storedMsg struct {
	Subject string `json:"subject"`
	Seq     uint64 `json:"seq"`
	Data    []byte `json:"data"`
}

// apiError is the error of a JetStream API reply.
type apiError struct {
	Code        int    `json:"code"`
	ErrCode     uint16 `json:"err_code"`
	Description string `json:"description"`
}

// JetStream API error codes a read handles.
const (
	// errCodeNoMessage is JetStream's "no message found".
	errCodeNoMessage = 10037
	// errCodeUnavailable is "JetStream system temporarily unavailable":
	// the stream (or the meta group) has no leader.
	errCodeUnavailable = 10008
)

// leaderGet asks the stream leader for one message (STREAM.MSG.GET).
func (s *Store) leaderGet(ctx context.Context, req map[string]any) (*msg, error) {
	ctx, cancel := s.reqCtx(ctx)
	defer cancel()
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("jsstore: encode message get: %w", err)
	}
	var resp struct {
		Message *storedMsg `json:"message"`
		Error   *apiError  `json:"error"`
	}
	// "JetStream system temporarily unavailable" (err_code 10008) comes
	// from a server that is not the stream's leader while the stream or
	// the meta group has no leader. During the meta group's election the
	// stream's leader still answers, but a non-leader's 10008 may come
	// first: the request is then sent again and every reply collected for
	// an attempt, the leader's taken (askLeader). While the stream itself
	// elects a leader (4–9 s) none comes, and the request is asked again,
	// as long as Config.Quorum says a leader can be elected; otherwise the
	// 10008 is returned at once, so that a call fails at once without
	// quorum (docs/operations.md, TestNoQuorumMesh).
	subj := apiMsgGet + s.cfg.Stream
	reply, err := s.request(ctx, subj, body)
	pause := 25 * time.Millisecond
	for {
		if err != nil {
			return nil, s.requestErr(err)
		}
		resp.Message, resp.Error = nil, nil
		if err := json.Unmarshal(reply.Data, &resp); err != nil {
			return nil, fmt.Errorf("jsstore: message get from stream %s: malformed reply: %w", s.cfg.Stream, err)
		}
		if resp.Error == nil || resp.Error.ErrCode != errCodeUnavailable || s.cfg.Quorum == nil {
			break
		}
		if qerr := s.cfg.Quorum(); qerr != nil {
			return nil, fmt.Errorf("%w: message get from stream %s: %s (err_code %d), and no leader can be elected: %w",
				ErrUnavailable, s.cfg.Stream, resp.Error.Description, resp.Error.ErrCode, qerr)
		}
		var got *nats.Msg
		if got, err = s.askLeader(ctx, subj, body); got != nil {
			reply = got
			continue
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("jsstore: message get from stream %s: no leader before the read's deadline (last: %s, err_code %d): %w",
				s.cfg.Stream, resp.Error.Description, resp.Error.ErrCode, ctx.Err())
		}
		err = nil // no leader answered this attempt: pause, ask again
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		pause = min(2*pause, 250*time.Millisecond)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == errCodeNoMessage:
		return nil, nil
	case resp.Error != nil:
		return nil, fmt.Errorf("jsstore: message get from stream %s: %s (code %d, err_code %d)", s.cfg.Stream, resp.Error.Description, resp.Error.Code, resp.Error.ErrCode)
	case resp.Message == nil:
		return nil, fmt.Errorf("jsstore: message get from stream %s: reply holds no message", s.cfg.Stream)
	}
	return &msg{seq: resp.Message.Seq, subject: resp.Message.Subject, data: resp.Message.Data}, nil
}

// askLeader sends a leader request once and collects its replies for one
// attempt (Config.AttemptTimeout): it returns the first that is not
// "temporarily unavailable" (the leader's), or nil and the last error when
// none came (the stream has no leader now). A leader request reaches
// every server; each one that is not the leader answers 10008 while the
// meta group has no leader, and the leader answers too.
func (s *Store) askLeader(ctx context.Context, subj string, body []byte) (*nats.Msg, error) {
	actx, cancel := deadline.Within(ctx, s.cfg.AttemptTimeout)
	defer cancel()
	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.nc.PublishRequest(subj, inbox, body); err != nil {
		return nil, err
	}
	for {
		m, err := deadline.NextMsg(actx, sub)
		if err != nil {
			return nil, err
		}
		var r struct {
			Error *apiError `json:"error"`
		}
		if len(m.Data) == 0 || json.Unmarshal(m.Data, &r) != nil || r.Error == nil || r.Error.ErrCode != errCodeUnavailable {
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				return nil, nats.ErrNoResponders
			}
			return m, nil
		}
	}
}

// request sends a JetStream API or direct-get request and returns the
// reply. No responders is retried briefly: a stream just created through
// another server, or electing a leader, answers a moment later. An
// attempt unanswered within Config.AttemptTimeout is sent again (a read:
// see resend.go).
func (s *Store) request(ctx context.Context, subj string, body []byte) (*nats.Msg, error) {
	first := time.Now()
	for attempt := 0; ; attempt++ {
		actx, cancel := deadline.Within(ctx, s.cfg.AttemptTimeout)
		reply, err := deadline.Request(actx, s.nc, subj, body)
		lost := err != nil && errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		cancel()
		if lost {
			continue
		}
		if !errors.Is(err, nats.ErrNoResponders) {
			return reply, err
		}
		again, werr := s.askAgain(ctx, first, attempt)
		if werr != nil {
			return nil, werr
		}
		if !again {
			return reply, err
		}
	}
}

// requestErr maps a failed request to the store's errors: the caller's
// context error stays itself; no responders and timeouts mean the stream
// is unavailable.
func (s *Store) requestErr(err error) error {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w: stream %s has no server answering (is JetStream up, does the stream exist?): %w", ErrUnavailable, s.cfg.Stream, err)
	case errors.Is(err, nats.ErrConnectionClosed):
		return fmt.Errorf("%w: %w", cardstore.ErrClosed, err)
	}
	return fmt.Errorf("jsstore: stream %s: %w", s.cfg.Stream, err)
}

// lastMany returns the last message of each subject (nil for a subject
// with none), in the order of subjects. Subjects must be distinct
// immutable records. With confirm, a subject a (possibly lagging) replica
// has no message for is asked again at the leader of a replicated stream.
func (s *Store) lastMany(ctx context.Context, subjects []string, confirm bool) ([]*msg, error) {
	out := make([]*msg, len(subjects))
	idx := make(map[string]int, len(subjects))
	for i, sub := range subjects {
		idx[sub] = i
	}
	for start := 0; start < len(subjects); start += maxMulti {
		want := subjects[start:min(start+maxMulti, len(subjects))]
		for len(want) > 0 {
			ms, pending, err := s.direct(ctx, directReq{MultiLast: want})
			if err != nil {
				return nil, err
			}
			for _, m := range ms {
				if i, ok := idx[m.subject]; ok {
					out[i] = m
				}
			}
			if pending == 0 || len(ms) == 0 {
				break // the rest have no message
			}
			// The reply was cut at the server's byte limit: ask again for
			// the subjects still unanswered.
			var rest []string
			for _, sub := range want {
				if out[idx[sub]] == nil {
					rest = append(rest, sub)
				}
			}
			want = rest
		}
	}
	if s.leaderReads && confirm {
		for i, m := range out {
			if m != nil {
				continue
			}
			var err error
			if out[i], err = s.leaderGet(ctx, map[string]any{"last_by_subj": subjects[i]}); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// maxReplyBytes caps the bytes of one batched direct get reply (the
// server cuts it after the message that crosses it; the store asks again
// for the rest), well below a subscription's default pending limit.
const maxReplyBytes = 16 << 20

// maxMulti is the most subjects one multi_last request names (nats-server
// answers at most 1024 messages).
const maxMulti = 1000

// prefetch holds mutable records read at once for one plan (commit.go),
// by subject; nil for a subject that has no message.
type prefetch map[string]*msg

// prefetchParallel bounds the reads prefetch has in flight at once.
const prefetchParallel = 16

// prefetch reads the last message of each subject as readLast does for a
// mutable record: on a replicated stream from the leader, the reads in
// parallel, so that a plan that reads a summary and a claim per Put waits
// for one round trip instead of one per record; on a single replica in
// one direct get.
func (s *Store) prefetch(ctx context.Context, subjects []string) (prefetch, error) {
	out := make(prefetch, len(subjects))
	if len(subjects) == 0 {
		return out, nil
	}
	if !s.leaderReads {
		ms, err := s.lastMany(ctx, subjects, false)
		if err != nil {
			return nil, err
		}
		for i, sub := range subjects {
			out[sub] = ms[i]
		}
		return out, nil
	}
	ms := make([]*msg, len(subjects))
	err := parallel.Each(len(subjects), prefetchParallel, func(i int) (err error) {
		ms[i], err = s.readLast(ctx, subjects[i], true)
		return err
	})
	if err != nil {
		return nil, err
	}
	for i, sub := range subjects {
		out[sub] = ms[i]
	}
	return out, nil
}

// lastOf returns the last message of a mutable record: from pre when pre
// read it, else read now.
func (s *Store) lastOf(ctx context.Context, pre prefetch, subject string) (*msg, error) {
	if m, ok := pre[subject]; ok {
		return m, nil
	}
	return s.readLast(ctx, subject, true)
}

// prefetchGuarded adds to pre the last message of each subject of a
// record the batch guards by its sequence (a compare-and-set): from the
// leader when leader is set (prefetch), else in one direct get that any
// replica may answer, whose stale answer only fails the batch.
func (s *Store) prefetchGuarded(ctx context.Context, pre prefetch, subjects []string, leader bool) error {
	if len(subjects) == 0 {
		return nil
	}
	if leader {
		got, err := s.prefetch(ctx, subjects)
		if err != nil {
			return err
		}
		maps.Copy(pre, got)
		return nil
	}
	ms, err := s.lastMany(ctx, subjects, false)
	if err != nil {
		return err
	}
	for i, sub := range subjects {
		pre[sub] = ms[i]
	}
	return nil
}
