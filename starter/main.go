// Command starter starts, follows and steers rollouts, and manages their Temporal Schedules.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"

	"github.com/noderollout/noderollout/internal/config"
	"github.com/noderollout/noderollout/internal/connect"
)

// command is one subcommand: its flags beyond the shared config keys, and what it does.
type command struct {
	usage string
	help  string
	flags func(fs *pflag.FlagSet)
	run   func(ctx context.Context, e *env) error
}

// env is what a running subcommand has at hand.
type env struct {
	cfg    config.Config
	fs     *pflag.FlagSet
	args   []string // positional arguments
	client client.Client
	out    io.Writer
}

// usageError exits 2: the command line, not the system, is wrong.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

var commands = map[string]command{}

func register(name string, c command) { commands[name] = c }

func main() {
	os.Exit(runMain(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

func runMain(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stdout)
		return 0
	}
	name := args[0]
	rest := args[1:]
	if name == "schedule" && len(rest) > 0 {
		name, rest = "schedule "+rest[0], rest[1:]
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "starter: unknown command %q\n\n", name)
		printUsage(stderr)
		return 2
	}
	fs := config.NewFlagSet(name, false)
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: starter %s\n\n%s\n\nFlags (also %s_<FLAG> or --config keys for the connection):\n%s", cmd.usage, cmd.help, config.EnvPrefix, fs.FlagUsages())
	}
	cfg, err := config.Load(fs, rest, environ)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "starter %s: %v\n", name, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tc, err := connect.Temporal(ctx, cfg, logger, nil)
	if err != nil {
		fmt.Fprintf(stderr, "starter %s: %v\n", name, err)
		return 1
	}
	defer tc.Close()
	err = cmd.run(ctx, &env{cfg: cfg, fs: fs, args: fs.Args(), client: tc, out: stdout})
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "starter %s: %v\n", name, err)
		return 2
	default:
		fmt.Fprintf(stderr, "starter %s: %v\n", name, err)
		return 1
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: starter <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-60s %s\n", commands[n].usage, firstLine(commands[n].help))
	}
	fmt.Fprintln(w, "\nRun 'starter <command> --help' for its flags.")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// oneArg returns the single positional argument a command takes.
func (e *env) oneArg(what string) (string, error) {
	if len(e.args) != 1 {
		return "", usageError{fmt.Sprintf("expected one %s, got %d arguments", what, len(e.args))}
	}
	return e.args[0], nil
}
