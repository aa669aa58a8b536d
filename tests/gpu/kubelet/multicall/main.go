// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl in one executable,
// which runs the one it is called as (through a symbolic link), as hyperkube did until Kubernetes
// 1.19 and k3s does today. Only for tests/gpu/kubelet: the five upstream commands (the same code and
// flags as their own main packages, built from the pinned files/bundle/upstream/kubernetes/go.mod)
// share most of their code, so one executable is a third of the five and fits the GPU host's
// transfer limit (tests/gpu/kubelet/pack.sh builds it).
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	_ "time/tzdata" // CronJob time zones (kube-apiserver, kube-controller-manager)

	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's credential plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	switch name := filepath.Base(os.Args[0]); name {
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "kubelet":
		os.Exit(cli.Run(kubelet.NewKubeletCommand(context.Background())))
	case "kubectl":
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) //nolint:errcheck // as cmd/kubectl does
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
	default:
		fmt.Fprintf(os.Stderr, "%s: run me as kube-apiserver, kube-controller-manager, kube-scheduler, kubelet or kubectl\n", name)
		os.Exit(2)
	}
}
