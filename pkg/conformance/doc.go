// Package conformance is the conformance kit: it drives an implementation
// of the UTP tool side written in any language through the protocol's cases
// against a live mesh, and says per case whether it behaved as
// docs/protocol.md requires (`utpmesh conformance tool`).
//
// # The probe contract
//
// The implementation under test serves one tool, by default named
// conformance_probe, registered with this entry (ProbeParameters, and
// options.timeout_seconds 5):
//
//	{"type":"object","additionalProperties":false,"required":["mode"],
//	 "properties":{"mode":{"enum":["echo","fail","sleep","crash"]},"value":{},
//	   "code":{"type":"string"},"message":{"type":"string"},
//	   "ms":{"type":"integer","minimum":0},"marker":{"type":"string"}}}
//
// Its handler:
//
//   - when "marker" is set, first appends one line to the file it names
//     (creating it), so the kit can count executions; in mode crash it
//     reads the file's line count before appending;
//   - echo: returns "value" as the result (null when absent);
//   - fail: ends the call failed with error code "code" and message
//     "message";
//   - sleep: waits "ms" milliseconds, stopping early when the call is
//     canceled or its timeout passes, then returns "value";
//   - crash: on the call's first execution (the marker file had no line)
//     ends the process at once, without a result (exit status 3); on a
//     later one returns "value".
//
// The kit and the implementation share a file system (the markers live in
// a directory of the kit's). Probe is the Go implementation; the
// TypeScript SDK's is pkg/sdk/typescript/examples/conformance-probe.ts.
//
// # The agent program contract
//
// `utpmesh conformance agent` serves the probe (Go) and runs the agent
// program under test once per run (`sh -c CMD`), with one AgentRequest on
// its stdin:
//
//	{"agent_turn_id":"T","wait_ms":N,"calls":[{"tool_call_id":"C","tool_name":"conformance_probe","arguments":{…}}]}
//
// The program makes the calls together, keeping each tool_call_id (so a
// re-run of the same request finds the calls the turn already has rather
// than making new ones), prints one AgentLine per call on stdout as its
// result arrives — {"tool_call_id","status","result","error"} — or status
// "pending" for a call without a result after wait_ms, and exits 0.
// Caller is the Go implementation (`utpmesh conformance caller`); the
// TypeScript one is pkg/sdk/typescript/examples/conformance-agent.ts.
//
// # Cases
//
// RunTool runs the cases of ToolCases in order: the agent's calls go
// through the mesh's admission with the kit's mandate; the commands the
// mesh did not admit (inline arguments, missing card, unauthorized) are
// published with the admin connection. RunAgent runs the cases of
// AgentCases. Each Result names the protocol.md section it proves.
package conformance
