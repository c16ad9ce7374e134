// Command gitea-runner (gro-testbed-runner) is this project's testbed runner for
// Gitea Actions. It is written for the testbed on the official workflow engine
// (gitea.com/gitea/act) and code.gitea.io/actions-proto-go, and mirrors the
// command line and observable behaviour of the official Gitea Runner v1.0.8
// that the operator relies on. It is not the official Gitea Runner.
//
//	gitea-runner register --no-interactive [--ephemeral] --instance URL --token T --name N --labels a:host,b:docker://img --config FILE
//	gitea-runner daemon --config FILE [--once]
//	gitea-runner cache-server --config FILE --dir DIR --port P --host H
//	gitea-runner --version
package main

import (
	"fmt"
	"os"

	log "github.com/sirupsen/logrus"
)

// Version is the one line `--version` prints.
const Version = "gro-testbed-runner 0.2 (gitea.com/gitea/act v0.261.10), not the official Gitea Runner"

const usage = `usage: gitea-runner [--config FILE] COMMAND [flags]
commands: register, daemon, cache-server, version (--version)`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	log.SetOutput(os.Stderr)
	log.SetFormatter(&log.TextFormatter{FullTimestamp: true, DisableColors: true})
	// The official runner takes --config/-c before the command as well.
	var global []string
	for len(args) > 0 && (args[0] == "-c" || args[0] == "--config" || args[0] == "-config") && len(args) > 1 {
		global = append(global, "--config", args[1])
		args = args[2:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return 1
	}
	rest := append(global, args[1:]...)
	var err error
	switch args[0] {
	case "--version", "-v", "version":
		fmt.Println(Version)
		return 0
	case "register":
		err = registerCmd(rest)
	case "daemon":
		err = daemonCmd(rest)
	case "cache-server":
		err = cacheServerCmd(rest)
	case "-h", "--help", "help":
		fmt.Println(usage)
		return 0
	default:
		err = fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
	if err != nil {
		log.Error(err)
		return 1
	}
	return 0
}

// setLogLevel applies log.level from the config to the process logger.
func setLogLevel(level string) {
	if l, err := log.ParseLevel(level); err == nil {
		log.SetLevel(l)
	}
}
