package cardstore

import (
	"context"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// turnAgentFirstPage is the size of the first page TurnAgent reads: a
// turn's first card normally names its agent (the tool.call card the
// admission writes), so one short read decides.
const turnAgentFirstPage = 8

// TurnAgent returns the agent a project's turn belongs to: the
// metadata.agent_id of its first card, in write order, that names one —
// the agent ListTurns reports for it (TurnInfo.AgentID). found is false
// when the project has no card of the turn; agent is "" when the turn has
// cards but none names an agent. It reads the turn's cards in pages until
// one names an agent. The mesh's CardStore server uses it to decide
// whether a card or turn is the agent's of an agent-scoped request
// (cardstore/natsstore), the admission to keep an agent out of another
// agent's turn.
func TurnAgent(ctx context.Context, st Store, projectID, agentTurnID string) (agent string, found bool, err error) {
	req := ListTurnRequest{ProjectID: projectID, AgentTurnID: agentTurnID, Limit: turnAgentFirstPage}
	for {
		page, err := st.ListTurn(ctx, req)
		if err != nil {
			return "", false, err
		}
		found = found || len(page.Cards) > 0
		for _, c := range page.Cards {
			if c.Metadata.AgentID != "" {
				return c.Metadata.AgentID, true, nil
			}
		}
		if page.Next == 0 {
			return "", found, nil
		}
		req.After, req.Limit = page.Next, MaxPage
	}
}

// CardAgent returns the agent a card belongs to: its turn's agent
// (TurnAgent) when it names a turn, else its own metadata.agent_id ("" for
// a card of no agent).
func CardAgent(ctx context.Context, st Store, c *card.Card) (string, error) {
	if c.Metadata.AgentTurnID == "" {
		return c.Metadata.AgentID, nil
	}
	agent, _, err := TurnAgent(ctx, st, c.ProjectID, c.Metadata.AgentTurnID)
	return agent, err
}
