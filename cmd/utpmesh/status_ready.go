package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// errNotReady: status found the mesh unable to take calls (exit 1).
var errNotReady = errors.New("not ready")

// nodeStatus is a JetStream server as the replicated assets see it.
type nodeStatus struct {
	Name string `json:"name"`
	// Online is false when every group that has the node as a member
	// reports it offline (or none has seen it lately).
	Online bool `json:"online"`
	// Leads counts the streams, buckets and consumers it leads.
	Leads int `json:"leads"`
	// Behind counts the assets whose group sees the node online but not
	// current: it is routed but does not keep up, as a node whose
	// JetStream its storage guard stopped (a full disk) or one catching
	// up after a restart.
	Behind int `json:"behind"`
}

// assetStatus is one stream, key-value bucket or consumer and its RAFT
// group.
type assetStatus struct {
	Kind     string `json:"kind"` // stream, bucket or consumer
	Name     string `json:"name"`
	Stream   string `json:"stream,omitempty"` // a consumer's stream
	Replicas int    `json:"replicas"`
	Leader   string `json:"leader"`
	// Online counts the replicas, leader included, that are online.
	Online int `json:"online"`
	// Quorum: a majority of the replicas is online and there is a leader.
	Quorum bool `json:"quorum"`
	// Stalled says why the asset takes no writes ("" when it does).
	Stalled string   `json:"stalled,omitempty"`
	Offline []string `json:"offline"`
	// Behind are the replicas online but not current (see
	// nodeStatus.Behind).
	Behind []string `json:"behind"`
	online []string // replicas seen online, leader included
}

// assetStatus reads every stream (buckets are the KV_ streams) and the
// command stream's consumers, their leaders and replicas. An error means
// JetStream did not answer at all.
func assetStatuses(ctx context.Context, nc *nats.Conn, timeout time.Duration, rep *statusReport) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := js.AccountInfo(lctx); err != nil {
		return jetStreamDown(err)
	}
	lister := js.ListStreams(lctx)
	var infos []*jetstream.StreamInfo
	for si := range lister.Info() {
		infos = append(infos, si)
	}
	if err := lister.Err(); err != nil {
		return jetStreamDown(err)
	}
	nodes := map[string]*nodeStatus{}
	for _, si := range infos {
		kind, name := "stream", si.Config.Name
		if b, ok := strings.CutPrefix(name, "KV_"); ok {
			kind, name = "bucket", b
		}
		rep.addAsset(assetOf(kind, name, "", si.Config.Replicas, si.Cluster, nc.ConnectedServerName()), nodes)
		if kind != "stream" {
			continue
		}
		st, err := js.Stream(lctx, si.Config.Name)
		if err != nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("stream %s did not answer: %v", si.Config.Name, err))
			continue
		}
		cl := st.ListConsumers(lctx)
		for ci := range cl.Info() {
			replicas := ci.Config.Replicas
			if replicas == 0 {
				replicas = si.Config.Replicas
			}
			rep.addAsset(assetOf("consumer", ci.Name, si.Config.Name, replicas, ci.Cluster, nc.ConnectedServerName()), nodes)
		}
		if err := cl.Err(); err != nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("consumers of stream %s did not answer: %v", si.Config.Name, err))
		}
	}
	for _, n := range nodes {
		rep.Nodes = append(rep.Nodes, *n)
	}
	sort.Slice(rep.Nodes, func(i, j int) bool { return rep.Nodes[i].Name < rep.Nodes[j].Name })
	sort.Slice(rep.Assets, func(i, j int) bool {
		a, b := rep.Assets[i], rep.Assets[j]
		if a.Kind != b.Kind {
			return a.Kind > b.Kind // streams, consumers, buckets
		}
		return a.Stream+"/"+a.Name < b.Stream+"/"+b.Name
	})
	return nil
}

// jetStreamDown explains a JetStream API that does not answer.
func jetStreamDown(err error) error {
	return fmt.Errorf("JetStream does not answer (%v): on a cluster node, the node may have lost its quorum (no meta leader); on a single node, JetStream may be stopped after a storage fault (disk full, see the mesh's log and /readyz)", err)
}

// assetOf builds an asset's status from its cluster info.
// An asset of a single server (no RAFT group) is led by server.
func assetOf(kind, name, stream string, replicas int, ci *jetstream.ClusterInfo, server string) assetStatus {
	if replicas < 1 {
		replicas = 1
	}
	a := assetStatus{Kind: kind, Name: name, Stream: stream, Replicas: replicas, Offline: []string{}, Behind: []string{}}
	if ci == nil || ci.RaftGroup == "" && ci.Leader == "" && len(ci.Replicas) == 0 {
		ci = &jetstream.ClusterInfo{Leader: server}
	}
	a.Leader = ci.Leader
	if a.Leader != "" {
		a.online = append(a.online, a.Leader)
	}
	for _, p := range ci.Replicas {
		if p.Offline {
			a.Offline = append(a.Offline, p.Name)
		} else {
			a.online = append(a.online, p.Name)
			if !p.Current {
				a.Behind = append(a.Behind, p.Name)
			}
		}
	}
	a.Online = len(a.online)
	a.Quorum = a.Leader != "" && a.Online > replicas/2
	switch {
	case a.Leader == "":
		a.Stalled = "no leader"
	case !a.Quorum:
		a.Stalled = fmt.Sprintf("no quorum: %d of %d replicas online", a.Online, replicas)
	}
	return a
}

// addAsset records a and the nodes it names; a stalled asset is a problem.
func (r *statusReport) addAsset(a assetStatus, nodes map[string]*nodeStatus) {
	r.Assets = append(r.Assets, a)
	node := func(name string) *nodeStatus {
		n := nodes[name]
		if n == nil {
			n = &nodeStatus{Name: name}
			nodes[name] = n
		}
		return n
	}
	for _, o := range a.online {
		node(o).Online = true
	}
	if a.Leader != "" {
		node(a.Leader).Leads++
	}
	for _, o := range a.Offline {
		node(o)
	}
	for _, b := range a.Behind {
		node(b).Behind++
	}
	if a.Stalled != "" {
		what := a.Kind + " " + a.Name
		if a.Stream != "" {
			what = "consumer " + a.Stream + "/" + a.Name
		}
		r.Problems = append(r.Problems, fmt.Sprintf("%s is stalled: %s", what, a.Stalled))
	}
}

// writeReadiness prints the readiness part of the status.
func writeReadiness(ew *statusWriter, r *statusReport) {
	if r.Ready {
		ew.printf("ready: JetStream answers; every stream, bucket and consumer has a leader and a quorum\n")
	} else {
		ew.printf("NOT READY\n")
		for _, p := range r.Problems {
			ew.printf("  - %s\n", p)
		}
	}
	if len(r.Nodes) > 0 {
		tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tONLINE\tLEADS\tBEHIND")
		for _, n := range r.Nodes {
			fmt.Fprintf(tw, "%s\t%t\t%d\t%d\n", n.Name, n.Online, n.Leads, n.Behind)
		}
		_ = tw.Flush()
		for _, n := range r.Nodes {
			if n.Online && n.Behind > 0 {
				ew.printf("node %s is online but not current in %s: it does not keep up (its JetStream stopped on a full disk? see its /readyz and log) or it is catching up; the other replicas take the writes\n",
					n.Name, plural(n.Behind, "asset", "assets"))
			}
		}
	}
	if len(r.Assets) > 0 {
		tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tASSET\tREPLICAS\tLEADER\tONLINE\tQUORUM\tSTALLED")
		consumers := 0
		for _, a := range r.Assets {
			if a.Kind == "consumer" && a.Stalled == "" {
				consumers++ // the healthy ones are summed up below (--json lists them)
				continue
			}
			name := a.Name
			if a.Stream != "" {
				name = a.Stream + "/" + a.Name
			}
			leader, stalled := a.Leader, a.Stalled
			if leader == "" {
				leader = "-"
			}
			if stalled == "" {
				stalled = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%t\t%s\n", a.Kind, name, a.Replicas, leader, a.Online, a.Quorum, stalled)
		}
		_ = tw.Flush()
		if consumers > 0 {
			ew.printf("and %s, each with a leader and a quorum (--json lists them)\n", plural(consumers, "consumer", "consumers"))
		}
	}
	ew.printf("\n")
}
