package nodejob

import (
	"os"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Flags are the flags of a command that makes these Calls (bench/baseline, bench/floorworker),
// written once so that both render the same kind of template into a namespace through a client
// of the same limits, and their runs are compared on their dispatch alone.
type Flags struct {
	Kubeconfig, Namespace, Template, Run string
	QPS                                  float64
	Burst                                int
}

// Add adds the flags to fs; run is the default label value marking the command's Jobs.
func (f *Flags) Add(fs *pflag.FlagSet, run string) {
	fs.StringVar(&f.Kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig")
	fs.StringVar(&f.Namespace, "namespace", "default", "namespace of the Jobs")
	fs.StringVar(&f.Template, "template", "", "file holding the batch/v1 Job template; {{node}} is replaced by the node name")
	fs.StringVar(&f.Run, "run", run, "label value marking this run's Jobs")
	fs.Float64Var(&f.QPS, "kube-qps", 1000, "client queries per second")
	fs.IntVar(&f.Burst, "kube-burst", 2000, "client burst")
}

// Client is the Kubernetes client of --kubeconfig at --kube-qps and --kube-burst, speaking
// protobuf as the worker does.
func (f *Flags) Client(userAgent string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", f.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst, cfg.UserAgent = float32(f.QPS), f.Burst, userAgent
	UseProtobuf(cfg)
	return kubernetes.NewForConfig(cfg)
}
