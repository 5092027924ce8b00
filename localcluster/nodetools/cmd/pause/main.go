// Command pause is the process of a pod's sandbox container: it holds the pod's
// namespaces open, reaps the zombies of a pod that shares its PID namespace, and exits
// 0 on SIGINT or SIGTERM. It is what registry.k8s.io/pause does, for the pause image
// built here where no registry can be reached.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if os.Getpid() != 1 {
		os.Stderr.WriteString("pause: warning: not running as PID 1\n")
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for received := range signals {
		if received != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
