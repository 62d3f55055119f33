package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// outputFormats are what -o takes on every command that prints.
var outputFormats = []string{"table", "json", "yaml"}

func outputFlag(cmd *cobra.Command) {
	cmd.Flags().StringP("output", "o", "table", "output format: "+strings.Join(outputFormats, ", "))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
}

// checkOutput rejects an unknown -o before anything is done.
func checkOutput(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup("output")
	if f == nil {
		return nil
	}
	for _, known := range outputFormats {
		if f.Value.String() == known {
			return nil
		}
	}
	return usageError{fmt.Sprintf("-o %q is not an output format; use %s", f.Value.String(), strings.Join(outputFormats, ", "))}
}

// print writes v as JSON or YAML (the same field names: YAML is made from the JSON), or as
// the table the command draws.
func (a *app) print(v any, table func(io.Writer) error) error {
	switch a.flagString("output") {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(a.out, string(b))
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = a.out.Write(b)
		return err
	default:
		return table(a.out)
	}
}
