package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// apiCall is one kind of Kubernetes API request: a kube verb (get, list, watch, create,
// update, patch, delete, deletecollection) on a resource.
type apiCall struct {
	Verb        string `json:"verb"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
}

// apiCounts counts requests by kind.
type apiCounts map[apiCall]float64

func isWrite(verb string) bool {
	switch verb {
	case "create", "update", "patch", "apply", "delete", "deletecollection":
		return true
	}
	return false
}

func isRead(verb string) bool { return verb == "get" || verb == "list" || verb == "watch" }

// totals sums reads and writes.
func (c apiCounts) totals() (reads, writes float64) {
	for k, v := range c {
		switch {
		case isRead(k.Verb):
			reads += v
		case isWrite(k.Verb):
			writes += v
		}
	}
	return reads, writes
}

// sub is c minus before, dropping kinds that did not change.
func (c apiCounts) sub(before apiCounts) apiCounts {
	d := apiCounts{}
	for k, v := range c {
		if diff := v - before[k]; diff > 0 {
			d[k] = diff
		}
	}
	return d
}

func (c apiCounts) get(verb, resource string) float64 {
	var n float64
	for k, v := range c {
		if k.Verb == verb && k.Resource == resource && k.Subresource == "" {
			n += v
		}
	}
	return n
}

// classify names a request the way the API server's request info does, from its method and
// URL alone.
func classify(method string, u *url.URL) apiCall {
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return apiCall{Verb: strings.ToLower(method), Resource: "(non-resource)"}
	}
	watch := false
	if len(rest) > 0 && rest[0] == "watch" {
		watch, rest = true, rest[1:]
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	if len(rest) == 0 {
		return apiCall{Verb: "get", Resource: "(discovery)"}
	}
	call := apiCall{Resource: rest[0]}
	named := len(rest) >= 2
	if len(rest) >= 3 {
		call.Subresource = rest[2]
	}
	if w := u.Query().Get("watch"); w == "true" || w == "1" {
		watch = true
	}
	switch method {
	case http.MethodGet, http.MethodHead:
		switch {
		case watch:
			call.Verb = "watch"
		case named:
			call.Verb = "get"
		default:
			call.Verb = "list"
		}
	case http.MethodPost:
		call.Verb = "create"
	case http.MethodPut:
		call.Verb = "update"
	case http.MethodPatch:
		call.Verb = "patch"
	case http.MethodDelete:
		call.Verb = "delete"
		if !named {
			call.Verb = "deletecollection"
		}
	default:
		call.Verb = strings.ToLower(method)
	}
	return call
}

// countingProxy stands between one client process and the API server and counts that
// client's requests by verb and resource: the API server's own metrics cannot tell clients
// apart. It serves HTTP/2 over TLS on loopback, as the API server does, so the client's
// connection behaviour is unchanged; it forwards with the admin credentials.
type countingProxy struct {
	srv  *http.Server
	addr string
	ca   []byte

	mu      sync.Mutex
	counts  apiCounts
	seconds apiCounts // time from request to the end of the response, watches excluded
}

func startProxy(upstream *rest.Config) (*countingProxy, error) {
	target, err := url.Parse(upstream.Host)
	if err != nil {
		return nil, err
	}
	transport, err := rest.TransportFor(upstream)
	if err != nil {
		return nil, err
	}
	certPEM, cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{addr: ln.Addr().String(), ca: certPEM, counts: apiCounts{}, seconds: apiCounts{}}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     transport,
		FlushInterval: -1, // watches stream
		ErrorLog:      nil,
	}
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			call := classify(r.Method, r.URL)
			p.mu.Lock()
			p.counts[call]++
			p.mu.Unlock()
			start := time.Now()
			rp.ServeHTTP(w, r)
			if call.Verb != "watch" {
				p.mu.Lock()
				p.seconds[call] += time.Since(start).Seconds()
				p.mu.Unlock()
			}
		}),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		if err := p.srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("counting proxy stopped: %v", err)
		}
	}()
	return p, nil
}

// snapshot copies the counts and the seconds so far.
func (p *countingProxy) snapshot() (counts, seconds apiCounts) {
	p.mu.Lock()
	defer p.mu.Unlock()
	counts, seconds = make(apiCounts, len(p.counts)), make(apiCounts, len(p.seconds))
	for k, v := range p.counts {
		counts[k] = v
	}
	for k, v := range p.seconds {
		seconds[k] = v
	}
	return counts, seconds
}

func (p *countingProxy) close() { _ = p.srv.Close() }

// writeKubeconfig writes a kubeconfig that reaches the API server through the proxy.
func (p *countingProxy) writeKubeconfig(dir, name string) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["bench"] = &clientcmdapi.Cluster{Server: "https://" + p.addr, CertificateAuthorityData: p.ca}
	cfg.AuthInfos["bench"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "bench"}
	cfg.CurrentContext = "bench"
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return path, clientcmd.WriteToFile(*cfg, path)
}

// selfSigned makes the proxy's serving certificate for 127.0.0.1.
func selfSigned() ([]byte, tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "noderollout-bench-proxy"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return certPEM, cert, err
}
