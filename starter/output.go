package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"
)

// outputFormats are what -o takes on every command that prints; jsonpath= is followed by a
// template, as kubectl's.
var outputFormats = []string{"table", "wide", "json", "yaml", "name", "jsonpath="}

func outputFlag(cmd *cobra.Command) {
	cmd.Flags().StringP("output", "o", "table", "output format: table, wide (more columns), json, yaml, name (one name per line, as the ID commands take it) or jsonpath=TEMPLATE (kubectl's, over the JSON)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp|cobra.ShellCompDirectiveNoSpace))
}

// checkOutput rejects an unknown -o, or a jsonpath template that does not parse, before
// anything is done.
func checkOutput(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup("output")
	if f == nil {
		return nil
	}
	v := f.Value.String()
	if tpl, ok := strings.CutPrefix(v, "jsonpath="); ok {
		if _, err := parseJSONPath(tpl); err != nil {
			return usageError{fmt.Sprintf("-o %s: %v; write e.g. -o jsonpath='{.status}'", v, err)}
		}
		return nil
	}
	for _, known := range outputFormats {
		if v == known {
			return nil
		}
	}
	return usageError{fmt.Sprintf("-o %q is not an output format; use %s", v, strings.Join(outputFormats, ", "))}
}

// parseJSONPath parses a kubectl jsonpath template; as kubectl, it takes one without braces
// ("jsonpath=.status") as the expression itself.
func parseJSONPath(tpl string) (*jsonpath.JSONPath, error) {
	if !strings.Contains(tpl, "{") {
		tpl = "{" + tpl + "}"
	}
	j := jsonpath.New("output")
	return j, j.Parse(tpl)
}

// namer is a view that -o name can print: the names of what it shows.
type namer interface{ names() []string }

// wide tells the table drawing whether -o wide asked for more columns.
func (a *app) wide() bool { return a.flagString("output") == "wide" }

// print writes v as JSON or YAML (the same field names: YAML is made from the JSON), through
// a jsonpath template, as its names, or as the table the command draws (wide or not).
func (a *app) print(v any, table func(io.Writer) error) error {
	out := a.flagString("output")
	switch {
	case out == "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(a.out, string(b))
		return err
	case out == "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = a.out.Write(b)
		return err
	case out == "name":
		n, ok := v.(namer)
		if !ok {
			return usageError{"-o name: this command prints no names; use -o json or -o jsonpath="}
		}
		for _, name := range n.names() {
			if _, err := fmt.Fprintln(a.out, name); err != nil {
				return err
			}
		}
		return nil
	case strings.HasPrefix(out, "jsonpath="):
		return printJSONPath(a.out, strings.TrimPrefix(out, "jsonpath="), v)
	default:
		if table == nil {
			return nil
		}
		return table(a.out)
	}
}

// printJSONPath evaluates the template over v as -o json prints it, ending with a newline as
// kubectl's output does not (a shell prompt after it is easier to read).
func printJSONPath(w io.Writer, tpl string, v any) error {
	j, err := parseJSONPath(tpl)
	if err != nil {
		return usageError{err.Error()}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var data any
	if err := json.Unmarshal(b, &data); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := j.Execute(&buf, data); err != nil {
		return usageError{fmt.Sprintf("-o jsonpath=%s: %v", tpl, err)}
	}
	if buf.Len() > 0 && !bytes.HasSuffix(buf.Bytes(), []byte("\n")) {
		buf.WriteByte('\n')
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// forMachines tells an -o other than a table: then a command prints one document on stdout
// and no progress.
func (a *app) forMachines() bool {
	out := a.flagString("output")
	return out != "table" && out != "wide"
}
