package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

func init() {
	register(spec{name: "cards", order: 50, summary: "read cards from the CardStore: get ID...",
		make: func(e env) command { return &cardsCommand{env: e} }})
}

type cardsCommand struct{ env env }

const cardsGetSynopsis = `utpmesh cards get ID... [--turn TURN] [--project P]

Each ID is a card id, or, with --turn TURN, a tool_call_id of that turn,
which stands for every card of the call (its tool.call and tool.result
cards, in write order). 'utpmesh turns show TURN' lists both kinds.

Cards are printed as one JSON array, in the order asked, each card once,
always: a card is JSON and any table would lose its content. --json is
accepted and changes nothing.`

func (c *cardsCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(c.env.stdout, "Usage: utpmesh cards get ID... [--turn TURN] [--project P]\n\n  get ID...   print the cards as a JSON array, in the order asked; an ID is a\n              card id, or a tool_call_id of the turn given with --turn\n\nRun 'utpmesh cards get --help' for the flags.\n")
		if len(args) == 0 {
			return usagef("name a subcommand: get")
		}
		return &usageError{msg: "help", help: true}
	}
	if args[0] != "get" {
		return usagef("unknown subcommand %q (use: utpmesh cards get ID...)", args[0])
	}
	fs, mf, pf := newProjectFlagSet("cards get", cardsGetSynopsis, c.env)
	turnID := fs.String("turn", "", "the turn whose tool_call_ids may be given instead of card ids")
	ids, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return usagef("name the card ids to print, e.g. 'utpmesh cards get 0190c7a2-…', or tool_call_ids with --turn TURN (a turn's ids: utpmesh turns show TURN)")
	}
	if err := card.ValidateName("project_id", pf.project); err != nil {
		return usagef("--project: %v", err)
	}
	if *turnID == "" {
		for _, id := range ids {
			if !card.ValidID(id) {
				return usagef("%q is not a card id; if it is a tool_call_id pass --turn TURN (card ids are canonical lower-case UUIDs like 0190c7a2-5b1e-7c3d-8e4f-a1b2c3d4e5f6)", id)
			}
		}
	}
	nc, store, err := openStore(ctx, mf, pf, "cards")
	if err != nil {
		return err
	}
	defer nc.Close()

	// With --turn, an id that is a tool_call_id of the turn stands for the
	// call's cards; anything else must be a card id.
	var turnCards []*card.Card
	byCall := map[string][]*card.Card{}
	if *turnID != "" {
		turnCards, err = cardstore.AllTurn(ctx, store, pf.project, *turnID)
		if errors.Is(err, cardstore.ErrInvalid) {
			return usagef("--turn: %v", err)
		}
		if err != nil {
			return fmt.Errorf("read turn %s: %w", *turnID, err)
		}
		if len(turnCards) == 0 {
			return fmt.Errorf("project %s has no card of turn %q (list the project's turns: utpmesh turns ls --project %s)", pf.project, *turnID, pf.project)
		}
		for _, cd := range turnCards {
			if cd.ToolCallID != "" {
				byCall[cd.ToolCallID] = append(byCall[cd.ToolCallID], cd)
			}
		}
		for _, id := range ids {
			if byCall[id] == nil && !card.ValidID(id) {
				return usagef("%q is neither a card id nor a tool_call_id of turn %s (its tool_call_ids: %s)", id, *turnID, strings.Join(callIDs(turnCards), ", "))
			}
		}
	}
	var cardIDs []string
	for _, id := range ids {
		if byCall[id] == nil {
			cardIDs = append(cardIDs, id)
		}
	}
	byID := map[string]*card.Card{}
	var missing []string
	for start := 0; start < len(cardIDs); start += cardstore.MaxBatch {
		end := min(start+cardstore.MaxBatch, len(cardIDs))
		r, err := store.GetMany(ctx, pf.project, cardIDs[start:end])
		if err != nil {
			return fmt.Errorf("read cards: %w", err)
		}
		for _, cd := range r.Cards {
			byID[cd.CardID] = cd
		}
		missing = append(missing, r.Missing...)
	}
	found := []*card.Card{}
	printed := map[string]bool{} // each card once, where it is first asked for
	for _, id := range ids {
		cs := byCall[id]
		if cs == nil && byID[id] != nil {
			cs = []*card.Card{byID[id]}
		}
		for _, cd := range cs {
			if !printed[cd.CardID] {
				printed[cd.CardID] = true
				found = append(found, cd)
			}
		}
	}
	if err := writeJSON(c.env.stdout, found); err != nil {
		return err
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("project %s has no card %s", pf.project, strings.Join(missing, ", "))
		if *turnID == "" {
			msg += "; if it is a tool_call_id pass --turn TURN"
		} else {
			msg += fmt.Sprintf(", and turn %s has no tool_call_id of that name (its tool_call_ids: %s)", *turnID, strings.Join(callIDs(turnCards), ", "))
		}
		return fmt.Errorf("%s", msg)
	}
	return nil
}

// callIDs lists the distinct tool_call_ids of cards, in order.
func callIDs(cards []*card.Card) []string {
	var out []string
	seen := map[string]bool{}
	for _, cd := range cards {
		if cd.ToolCallID != "" && !seen[cd.ToolCallID] {
			seen[cd.ToolCallID] = true
			out = append(out, cd.ToolCallID)
		}
	}
	if out == nil {
		return []string{"none"}
	}
	return out
}

// openStore connects and returns a CardStore client for the project's
// channel.
func openStore(ctx context.Context, mf *meshFlags, pf *projectFlags, name string) (*nats.Conn, *natsstore.Client, error) {
	nc, err := mf.connect(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	store, err := natsstore.NewClient(nc, svc.WithVersion(mf.version), svc.WithChannel(pf.channel), svc.WithTimeout(mf.timeout))
	if err != nil {
		nc.Close()
		return nil, nil, usagef("%v", err)
	}
	return nc, store, nil
}
