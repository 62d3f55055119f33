// Package version says which build of noderollout is running. Version and Commit are stamped
// by the build (Makefile, Dockerfile) with -ldflags -X; a plain `go build` falls back to what
// the Go toolchain recorded from the module and VCS.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Stamped with -ldflags "-X github.com/noderollout/noderollout/internal/version.Version=v1.2.3 ...".
var (
	Version = ""
	Commit  = ""
)

// Info is one build's identity.
type Info struct {
	Version    string `json:"version"`
	Commit     string `json:"commit"`
	GoVersion  string `json:"goVersion"`
	SDKVersion string `json:"temporalSDKVersion"`
}

// Get reads the stamped values, filling gaps from the build info.
func Get() Info {
	info := Info{Version: Version, Commit: Commit, GoVersion: runtime.Version(), SDKVersion: "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && info.Commit == "" {
				info.Commit = s.Value
			}
		}
		for _, d := range bi.Deps {
			if d.Path == "go.temporal.io/sdk" {
				info.SDKVersion = d.Version
			}
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// String is the one line `starter version` and `worker --version` print.
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, %s, Temporal Go SDK %s)", i.Version, i.Commit, i.GoVersion, i.SDKVersion)
}
