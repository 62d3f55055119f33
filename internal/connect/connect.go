// Package connect dials the Temporal frontend and builds the Kubernetes client from a Config.
package connect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	apiversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/noderollout/noderollout/internal/config"
)

// TemporalOptions are the client options of a Config: address, namespace, mTLS or API key.
func TemporalOptions(c config.Config, logger *slog.Logger, metrics client.MetricsHandler) (client.Options, error) {
	opts := client.Options{
		HostPort:       c.TemporalAddress,
		Namespace:      c.TemporalNamespace,
		Logger:         sdklog.NewStructuredLogger(logger),
		MetricsHandler: metrics,
	}
	tlsConfig, err := temporalTLS(c)
	if err != nil {
		return opts, err
	}
	opts.ConnectionOptions.TLS = tlsConfig
	if c.TemporalCompression == "none" {
		opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
	}
	if c.APIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(c.APIKey)
	}
	return opts, nil
}

func temporalTLS(c config.Config) (*tls.Config, error) {
	if !c.UsesTLS() {
		return nil, nil
	}
	t := &tls.Config{ServerName: c.TLSServerName, MinVersion: tls.VersionTLS12}
	certPEM, keyPEM := c.TLSCertData, c.TLSKeyData
	if c.TLSCert != "" {
		var err error
		if certPEM, err = os.ReadFile(c.TLSCert); err != nil {
			return nil, config.BadValue("tls-cert", err.Error())
		}
	}
	if c.TLSKey != "" {
		var err error
		if keyPEM, err = os.ReadFile(c.TLSKey); err != nil {
			return nil, config.BadValue("tls-key", err.Error())
		}
	}
	if len(certPEM) > 0 {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, config.BadValue("tls-cert", "with tls-key: "+err.Error())
		}
		t.Certificates = []tls.Certificate{pair}
	}
	caPEM := c.TLSCAData
	if c.TLSCA != "" {
		var err error
		if caPEM, err = os.ReadFile(c.TLSCA); err != nil {
			return nil, config.BadValue("tls-ca", err.Error())
		}
	}
	if len(caPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, config.BadValue("tls-ca", fmt.Sprintf("%s holds no PEM certificate", c.TLSCA))
		}
		t.RootCAs = pool
	}
	return t, nil
}

// Temporal dials the frontend and checks it answers.
func Temporal(ctx context.Context, c config.Config, logger *slog.Logger, metrics client.MetricsHandler) (client.Client, error) {
	opts, err := TemporalOptions(c, logger, metrics)
	if err != nil {
		return nil, err
	}
	cl, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("temporal at %s (namespace %s): %w\n  is Temporal running there? Set the address with --temporal-address, TEMPORAL_ADDRESS or NODEROLLOUT_TEMPORAL_ADDRESS (local stack: source dev/env)", c.TemporalAddress, c.TemporalNamespace, err)
	}
	return cl, nil
}

// KubeConfig is the kubeconfig named in the Config, else the in-cluster config, else the usual
// $KUBECONFIG / ~/.kube/config.
func KubeConfig(c config.Config) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	switch {
	case c.Kubeconfig != "":
		if rc, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
			return nil, config.BadValue("kubeconfig", err.Error())
		}
	default:
		rc, err = rest.InClusterConfig()
		if err != nil {
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
			if clientcmd.IsEmptyConfig(err) {
				// client-go's own words ("try setting KUBERNETES_MASTER") name a variable
				// nothing reads any more; say where we looked.
				return nil, config.BadValue("kubeconfig", fmt.Sprintf(
					"no Kubernetes configuration found: no in-cluster config, --kubeconfig, $KUBECONFIG or ~/.kube/config (looked at %s); run the worker in a Pod with its ServiceAccount, or give --kubeconfig FILE",
					strings.Join(rules.GetLoadingPrecedence(), ", ")))
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	rc.QPS = float32(c.KubeQPS)
	rc.Burst = c.KubeBurst
	rc.UserAgent = "noderollout-worker"
	// Protobuf, as the cluster's own controllers speak it: cheaper than JSON to encode and
	// decode for the API server (every Job watch event) and for the worker.
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return rc, nil
}

// Kubernetes is the clientset for the Config's cluster.
func Kubernetes(c config.Config) (kubernetes.Interface, error) {
	rc, err := KubeConfig(c)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// minKubernetes is the oldest Kubernetes the worker runs against: it finds a Job's Pods by their
// batch.kubernetes.io/ labels, which Kubernetes sets from 1.27 on. Older, it would find none and
// take a Job's Pods for stopped while they still run.
var minKubernetes = version.MajorMinor(1, 27)

// CheckKubernetesVersion reads the API server's version and refuses one older than
// minKubernetes. A version it cannot read or parse is logged and let through, as nil: that says
// nothing about the cluster being too old, and refusing would stop a worker that runs today.
func CheckKubernetesVersion(ctx context.Context, d discovery.ServerVersionInterface, logger *slog.Logger) (*version.Version, error) {
	info, err := discovery.ToServerVersionInterfaceWithContext(d).ServerVersionWithContext(ctx)
	if err != nil {
		logger.Warn("could not read the Kubernetes version; not checked", "minimum", minKubernetes.String(), "error", err)
		return nil, nil
	}
	v, found := kubernetesVersion(info)
	if v == nil {
		logger.Warn("could not parse the Kubernetes version; not checked", "gitVersion", info.GitVersion, "major", info.Major, "minor", info.Minor, "minimum", minKubernetes.String())
		return nil, nil
	}
	if v.LessThan(minKubernetes) {
		return v, fmt.Errorf("the cluster runs Kubernetes %s; the worker needs %s or newer (it finds a Job's Pods by their batch.kubernetes.io/controller-uid label)\n  upgrade the cluster to Kubernetes %s or newer", found, minKubernetes, minKubernetes)
	}
	return v, nil
}

// kubernetesVersion is the server's version, and the string it was read from: its GitVersion
// ("v1.26.15-eks-abcdef", "v1.31.2+k3s1"), else Major and Minor (Minor is "27+" on GKE and EKS);
// nil if neither parses. A build without version stamps says v0.0.0: unknown too.
func kubernetesVersion(info *apiversion.Info) (*version.Version, string) {
	for _, s := range []string{info.GitVersion, info.Major + "." + info.Minor} {
		if v, err := version.ParseGeneric(s); err == nil && v.Major() > 0 {
			return v, s
		}
	}
	return nil, ""
}

// WaitForKubernetes asks the API server for its version until it answers, logging each failed
// try with the next one's time, so that a worker started against an unreachable cluster says
// so within seconds instead of waiting silently. It gives up when ctx ends (a signal) or after
// timeout.
func WaitForKubernetes(ctx context.Context, d discovery.ServerVersionInterface, host string, timeout time.Duration, logger *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	versions := discovery.ToServerVersionInterfaceWithContext(d)
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		tryCtx, tryCancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := versions.ServerVersionWithContext(tryCtx)
		tryCancel()
		if err == nil {
			if attempt > 1 {
				logger.Info("kubernetes API server reachable", "host", host, "attempt", attempt)
			}
			return nil
		}
		logger.Error("kubernetes API server not reachable; retrying", "host", host, "attempt", attempt, "retryIn", backoff.String(), "error", err)
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("the Kubernetes API server at %s was not reachable within %s (--startup-timeout): %w", host, timeout, err)
			}
			return fmt.Errorf("stopped before the Kubernetes API server at %s answered: %w", host, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 15*time.Second)
	}
}
