package registry_test

import (
	"context"
	"fmt"

	"github.com/utpmesh/utpmesh/pkg/registry"
)

func Example() {
	defs := []byte(`
tools:
  - tool_name: echo
    description: Echo the text back.
    target_subject: "cg.{ver}.{project_id}.{channel_id}.cmd.tool.echo"
    after_execution: suspend
    parameters:
      type: object
      properties:
        text: {type: string}
        times: {type: integer, minimum: 1}
      required: [text]
    options:
      timeout_seconds: 5
      args:
        defaults: {times: 1}
`)
	entries, err := registry.ParseYAML(defs, "demo")
	if err != nil {
		fmt.Println(err)
		return
	}
	reg := registry.NewMemory(nil)
	for _, e := range entries {
		if _, err := reg.Put(context.Background(), e); err != nil {
			fmt.Println(err)
			return
		}
	}

	echo, _ := reg.Get(context.Background(), "demo", "echo")
	schema, _ := registry.CompileSchema(echo.Parameters)
	args, _ := registry.ApplyArgs(echo.Options, []byte(`{"text":"hi"}`))
	fmt.Println(string(args), schema.Validate(args))
	fmt.Println(schema.Validate([]byte(`{"text":42}`)))
	fmt.Println(echo.Options.Timeout())

	_, err = reg.Put(context.Background(), &registry.Entry{ProjectID: "demo", ToolName: "list_tools"})
	fmt.Println(err)
	// Output:
	// {"text":"hi","times":1} <nil>
	// registry: invalid arguments: arguments/text: expected string, got number
	// 5s
	// registry: tool_name: "list_tools" is reserved for the built-in PMO tool
}
