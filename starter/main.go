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
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"

	"github.com/noderollout/noderollout/internal/config"
	"github.com/noderollout/noderollout/internal/connect"
	"github.com/noderollout/noderollout/internal/version"
)

// Exit codes: 1 the rollout or the server said no, 2 the command line, file or request is wrong.
const (
	exitFailed = 1
	exitUsage  = 2
)

// app is what a running subcommand has at hand. The Temporal client is dialled on first use,
// so commands that need no server (validate, version, completion, help) never dial, and
// start/dry-run reject a bad file before dialling.
type app struct {
	ctx     context.Context
	environ []string
	in      io.Reader // -f -
	out     io.Writer
	errOut  io.Writer
	cfg     config.Config
	cmd     *cobra.Command // the running subcommand, for its flags
	args    []string
	tc      client.Client
	// timeout is --command-timeout; cancel ends the context it bounds.
	timeout time.Duration
	cancel  context.CancelFunc
}

// errCommandTimeout is why a command's context ends when --command-timeout passes.
var errCommandTimeout = errors.New("command timed out")

// usageError exits 2: the command line, file or request, not the system, is wrong.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// runError exits 1: the rollout failed, or Temporal refused or could not be reached.
type runError struct{ err error }

func (e runError) Error() string { return e.err.Error() }
func (e runError) Unwrap() error { return e.err }

func main() {
	os.Exit(runMain(os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr))
}

func runMain(args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a := &app{ctx: ctx, environ: environ, in: stdin, out: stdout, errOut: stderr}
	defer a.close()
	root := newRoot(a)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if a.cancel != nil {
		if errors.Is(context.Cause(a.ctx), errCommandTimeout) && err != nil {
			err = runError{fmt.Errorf("gave up after --command-timeout %s: %w", a.timeout, err)}
		}
		a.cancel()
	}
	if err == nil {
		return 0
	}
	name := "starter"
	if cmd != nil && cmd != root {
		name = cmd.CommandPath()
	}
	fmt.Fprintf(stderr, "%s: %s\n", name, humanError(err))
	var re runError
	if errors.As(err, &re) {
		return exitFailed
	}
	if cmd != nil && cmd != root && !errors.As(err, new(usageError)) {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return exitUsage
}

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "starter",
		Short: "Start, follow and steer noderollout rollouts",
		Long: `starter starts rollouts (one Kubernetes Job per selected node, run by
Temporal), follows and steers them, and manages their Temporal Schedules.

Connection settings, lowest precedence first: temporal.toml profiles and
TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_*;
the --config file; NODEROLLOUT_<FLAG> variables; flags.`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		DisableAutoGenTag: true,
		// Suggestions are on by default; a distance of 2 catches "stauts" and "strat".
		SuggestionsMinimumDistance: 2,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			a.cmd, a.args = cmd, args
			if err := checkOutput(cmd); err != nil {
				return err
			}
			cfg, err := config.FromFlags(cmd.Flags(), a.environ)
			if err != nil {
				return usageError{err.Error()}
			}
			a.cfg = cfg
			if timeout, _ := cmd.Flags().GetDuration("command-timeout"); timeout > 0 {
				a.timeout = timeout
				a.ctx, a.cancel = context.WithTimeoutCause(a.ctx, timeout, errCommandTimeout)
			}
			return nil
		},
		Version: version.Get().String(),
	}
	root.SetVersionTemplate("starter {{.Version}}\n")
	config.AddFlags(root.PersistentFlags(), false)
	// As in the Temporal CLI: --address and --namespace name --temporal-address and
	// --temporal-namespace on every command, and --command-timeout bounds any command.
	root.SetGlobalNormalizationFunc(config.NormalizeFlagName)
	root.PersistentFlags().Duration("command-timeout", 0, "give up on the command after this long, e.g. 30s (0: no limit; as the Temporal CLI's)")
	wrapUsage(root, a.out)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError{config.WithFlagHint(err, cmd.Flags()).Error()}
	})
	root.AddGroup(&cobra.Group{ID: "rollout", Title: "Rollouts:"}, &cobra.Group{ID: "steer", Title: "Steering a running rollout:"})
	root.AddCommand(startCommand(a), dryRunCommand(a), undoCommand(a), validateCommand(a), listCommand(a), statusCommand(a),
		signalCommand(a, "pause"), signalCommand(a, "resume"), setParallelismCommand(a), approveCommand(a), abortCommand(a),
		fleetCommand(a), scheduleCommand(a), versionCommand(a))
	a.completeIDs(root)
	root.SetHelpCommandGroupID("")
	root.SetCompletionCommandGroupID("")
	return root
}

// wrapUsage wraps flag help at the terminal's width (80 columns when not a terminal).
func wrapUsage(root *cobra.Command, out io.Writer) {
	width := 80
	if tty, w := terminal(out); tty && w > 0 {
		width = w
	}
	cobra.AddTemplateFunc("wrapFlags", func(fs *pflag.FlagSet) string {
		return strings.TrimRight(fs.FlagUsagesWrapped(width-1), " \n")
	})
	tpl := root.UsageTemplate()
	tpl = strings.ReplaceAll(tpl, ".LocalFlags.FlagUsages | trimTrailingWhitespaces", "wrapFlags .LocalFlags")
	tpl = strings.ReplaceAll(tpl, ".InheritedFlags.FlagUsages | trimTrailingWhitespaces", "wrapFlags .InheritedFlags")
	root.SetUsageTemplate(tpl)
}

// client dials Temporal on first use.
func (a *app) client() (client.Client, error) {
	if a.tc != nil {
		return a.tc, nil
	}
	logger := slog.New(slog.NewTextHandler(a.errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tc, err := connect.Temporal(a.ctx, a.cfg, logger, nil)
	if bad := new(config.BadValueError); errors.As(err, &bad) {
		return nil, usageError{bad.Error()}
	}
	if err != nil {
		return nil, runError{err}
	}
	a.tc = tc
	return tc, nil
}

func (a *app) close() {
	if a.tc != nil {
		a.tc.Close()
	}
}

// run wraps a command's work: errors that are not already a usage error are failures (exit 1).
func run(f func() error) func(*cobra.Command, []string) error {
	return func(*cobra.Command, []string) error {
		err := f()
		if err == nil || errors.As(err, new(usageError)) || errors.As(err, new(runError)) {
			return err
		}
		return runError{err}
	}
}

func (a *app) flagString(name string) string {
	v, _ := a.cmd.Flags().GetString(name)
	return v
}

func (a *app) flagBool(name string) bool {
	v, _ := a.cmd.Flags().GetBool(name)
	return v
}

// fileFlag adds -f/--file, with completion of YAML and JSON files.
func fileFlag(cmd *cobra.Command) {
	cmd.Flags().StringP("file", "f", "", "rollout request, YAML or JSON (fields: see README); - reads standard input")
	_ = cmd.MarkFlagFilename("file", "yaml", "yml", "json")
}

// reasonFlag is --reason, which requesterMemo records beside the requester; whose names that
// memo in the help, worded alike on every command that has it.
func reasonFlag(cmd *cobra.Command, whose string) {
	cmd.Flags().String("reason", "", "why, recorded with the requester (user@host) in "+whose+" memo")
}

// startFlags are the flags every command that starts a workflow of its own has (start, undo,
// fleet start): --wait, with what it follows, --reason and -o for what it prints once started.
func startFlags(cmd *cobra.Command, wait, whose string) {
	cmd.Flags().Bool("wait", false, wait)
	reasonFlag(cmd, whose)
	outputFlag(cmd)
}

// filePath is -f, which every command that has it requires; what says what the file is.
func (a *app) filePath(what string) (string, error) {
	path := a.flagString("file")
	if path == "" {
		return "", usageError{"-f/--file is required: " + what}
	}
	return path, nil
}

func versionCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, Go and Temporal SDK versions",
		Args:  cobra.NoArgs,
		RunE: run(func() error {
			return a.print(version.Get(), func(w io.Writer) error {
				_, err := fmt.Fprintln(w, "starter", version.Get())
				return err
			})
		}),
	}
	outputFlag(cmd)
	return cmd
}

// humanError is err as one problem per line, without the SDK's "(type: ..., retryable: ...)".
func humanError(err error) string {
	msg := err.Error()
	for {
		i := strings.Index(msg, " (type: ")
		if i < 0 {
			break
		}
		j := strings.Index(msg[i:], ")")
		if j < 0 {
			break
		}
		msg = msg[:i] + msg[i+j+1:]
	}
	return msg
}
