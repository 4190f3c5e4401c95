package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

func init() {
	register(spec{name: "cards", order: 50, summary: "read cards from the CardStore: get ID...",
		make: func(e env) command { return &cardsCommand{env: e} }})
}

type cardsCommand struct{ env env }

func (c *cardsCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(c.env.stdout, "Usage: utpmesh cards get ID... [--project P]\n\n  get ID...   print the cards as a JSON array, in the order asked\n\nRun 'utpmesh cards get --help' for the flags.\n")
		if len(args) == 0 {
			return usagef("name a subcommand: get")
		}
		return &usageError{msg: "help", help: true}
	}
	if args[0] != "get" {
		return usagef("unknown subcommand %q (use: utpmesh cards get ID...)", args[0])
	}
	fs := newFlagSet("cards get", "utpmesh cards get ID... [--project P]\n\nCards are printed as one JSON array, in the order asked, always: a card is JSON\nand any table would lose its content. --json is accepted and changes nothing.", c.env)
	var mf meshFlags
	var pf projectFlags
	mf.register(fs, c.env)
	pf.register(fs)
	ids, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return usagef("name the card ids to print, e.g. 'utpmesh cards get 0190c7a2-…' (a turn's card ids: utpmesh turns show TURN --json)")
	}
	if err := card.ValidateName("project_id", pf.project); err != nil {
		return usagef("--project: %v", err)
	}
	for _, id := range ids {
		if !card.ValidID(id) {
			return usagef("%q is not a card id (a canonical lower-case UUID like 0190c7a2-5b1e-7c3d-8e4f-a1b2c3d4e5f6)", id)
		}
	}
	nc, err := mf.connect(ctx, "cards")
	if err != nil {
		return err
	}
	defer nc.Close()
	store, err := natsstore.NewClient(nc, natsstore.WithVersion(mf.version), natsstore.WithChannel(pf.channel), natsstore.WithTimeout(mf.timeout))
	if err != nil {
		return usagef("%v", err)
	}
	found := []*card.Card{}
	var missing []string
	for start := 0; start < len(ids); start += cardstore.MaxBatch {
		end := min(start+cardstore.MaxBatch, len(ids))
		r, err := store.GetMany(ctx, pf.project, ids[start:end])
		if err != nil {
			return fmt.Errorf("read cards: %w", err)
		}
		found = append(found, r.Cards...)
		missing = append(missing, r.Missing...)
	}
	if err := writeJSON(c.env.stdout, found); err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("project %s has no card %s", pf.project, strings.Join(missing, ", "))
	}
	return nil
}
