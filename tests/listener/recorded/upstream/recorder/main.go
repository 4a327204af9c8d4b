// Records the HTTP requests the upstream skr-webhook (runtime-watcher) sends to KCP, by driving its
// real admissionreview.Handler with AdmissionReviews and capturing what arrives at a TLS server.
package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	listenerEvent "github.com/kyma-project/runtime-watcher/listener/pkg/v2/event"

	"github.com/kyma-project/runtime-watcher/skr/pkg/admissionreview"
	"github.com/kyma-project/runtime-watcher/skr/pkg/requestparser"
	"github.com/kyma-project/runtime-watcher/skr/pkg/serverconfig"
	"github.com/kyma-project/runtime-watcher/skr/pkg/watchermetrics"
)

type recorded struct {
	Scenario string            `json:"scenario"`
	Source   string            `json:"source"`
	Method   string            `json:"method"`
	Path     string            `json:"path"`
	Headers  map[string]string `json:"headers"`
	Body     string            `json:"body"`
	// What the upstream listener library (listener/pkg/v2/event.UnmarshalSKREvent) makes of it.
	UpstreamListenerParsed map[string]any `json:"upstream_listener_parsed"`
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func keyPair(cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, ca bool, ips []net.IP) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  ca,
		BasicConstraintsValid: true,
		IPAddresses:           ips,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	must(err)
	cert, err := x509.ParseCertificate(der)
	must(err)
	keyDer, err := x509.MarshalECPrivateKey(key)
	must(err)
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDer})
}

func object(apiVersion, kind, namespace, name string, spec, status map[string]any) runtime.RawExtension {
	meta := map[string]any{"name": name, "uid": "0f8fad5b-d9cb-469f-a165-70867728950e", "resourceVersion": "4711",
		"labels": map[string]any{"operator.kyma-project.io/watched-by": "kyma"}}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	obj := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta}
	if spec != nil {
		obj["spec"] = spec
	}
	if status != nil {
		obj["status"] = status
	}
	raw, err := json.Marshal(obj)
	must(err)
	return runtime.RawExtension{Raw: raw}
}

type scenario struct {
	name        string
	module      string
	op          admissionv1.Operation
	gvk         metav1.GroupVersionKind
	subResource string
	old, cur    runtime.RawExtension
}

func main() {
	outDir := os.Args[1]
	dir, err := os.MkdirTemp("", "recorder")
	must(err)
	caCert, caKey, caPem, _ := keyPair("recorder-ca", nil, nil, true, nil)
	_, _, srvPem, srvKey := keyPair("kcp", caCert, caKey, false, []net.IP{net.ParseIP("127.0.0.1")})
	_, _, cliPem, cliKey := keyPair("skr-1", caCert, caKey, false, nil)
	for name, data := range map[string][]byte{"ca.crt": caPem, "srv.crt": srvPem, "srv.key": srvKey, "tls.crt": cliPem, "tls.key": cliKey} {
		must(os.WriteFile(filepath.Join(dir, name), data, 0o600))
	}

	var captured *http.Request
	var capturedBody []byte
	kcp := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		captured = r
		capturedBody, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	srvPair, err := tls.LoadX509KeyPair(filepath.Join(dir, "srv.crt"), filepath.Join(dir, "srv.key"))
	must(err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPem)
	kcp.TLS = &tls.Config{Certificates: []tls.Certificate{srvPair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	kcp.StartTLS()
	defer kcp.Close()

	config := serverconfig.ServerConfig{
		CACertPath: filepath.Join(dir, "ca.crt"), TLSCertPath: filepath.Join(dir, "tls.crt"),
		TLSKeyPath: filepath.Join(dir, "tls.key"), KCPAddress: strings.TrimPrefix(kcp.URL, "https://"),
		KCPContract: "v2", // as lifecycle-manager's skr-webhook/resources.yaml sets KCP_CONTRACT
	}
	metrics := watchermetrics.NewMetrics()
	parser := requestparser.NewRequestParser(serializer.NewCodecFactory(runtime.NewScheme()).UniversalDeserializer())
	handler := admissionreview.NewHandler(logr.Discard(), config, *parser, *metrics)

	kymaGVK := metav1.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1beta2", Kind: "Kyma"}
	kyma := func(channel string, state string) runtime.RawExtension {
		return object("operator.kyma-project.io/v1beta2", "Kyma", "kyma-system", "default",
			map[string]any{"channel": channel}, map[string]any{"state": state})
	}
	scenarios := []scenario{
		{"kyma-created", "lifecycle-manager", admissionv1.Create, kymaGVK, "", runtime.RawExtension{}, kyma("regular", "")},
		{"kyma-spec-updated", "lifecycle-manager", admissionv1.Update, kymaGVK, "", kyma("regular", "Ready"), kyma("fast", "Ready")},
		{"kyma-status-updated", "lifecycle-manager", admissionv1.Update, kymaGVK, "status", kyma("regular", "Processing"), kyma("regular", "Ready")},
		{"kyma-deleted", "lifecycle-manager", admissionv1.Delete, kymaGVK, "", kyma("regular", "Ready"), runtime.RawExtension{}},
		{"core-cluster-scoped-created", "lifecycle-manager", admissionv1.Create,
			metav1.GroupVersionKind{Group: "", Version: "v1", Kind: "Namespace"}, "", runtime.RawExtension{},
			object("v1", "Namespace", "", "team-a", nil, nil)},
	}
	// Upstream's own listener test data (lower-case keys, a leftover "owner"), as its listener parses it.
	testData, err := os.ReadFile("../listener/pkg/v2/event/test_resources/small_size.json")
	must(err)
	write(outDir, recorded{
		Scenario: "upstream-listener-testdata-small-size",
		Source:   "kyma-project/runtime-watcher listener/pkg/v2/event/test_resources/small_size.json (HEAD f92889f), verbatim",
		Method:   http.MethodPost, Path: "/v2/lifecycle-manager/event",
		Headers: map[string]string{"Content-Type": "application/json"}, Body: string(testData),
		UpstreamListenerParsed: upstreamParse("/v2/lifecycle-manager/event", testData, cliPem),
	})
	for _, s := range scenarios {
		captured, capturedBody = nil, nil
		review := admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{Kind: "AdmissionReview", APIVersion: "admission.k8s.io/v1"},
			Request: &admissionv1.AdmissionRequest{UID: "b8c0335f-ce87-4da3-82bf-a6a6a55d088e", Kind: s.gvk,
				Operation: s.op, SubResource: s.subResource, Object: s.cur, OldObject: s.old},
		}
		raw, err := json.Marshal(review)
		must(err)
		req := httptest.NewRequest(http.MethodPost, "/validate/"+s.module, bytes.NewReader(raw))
		rec := httptest.NewRecorder()
		handler.Handle(rec, req)
		if captured == nil {
			panic(fmt.Sprintf("%s: the webhook sent nothing: %s", s.name, rec.Body.String()))
		}
		headers := map[string]string{}
		keys := make([]string, 0, len(captured.Header))
		for k := range captured.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			headers[k] = strings.Join(captured.Header[k], ", ")
		}
		out := recorded{
			Scenario: s.name,
			Source: "kyma-project/runtime-watcher runtime-watcher/pkg/admissionreview.Handler (HEAD f92889f), " +
				"driven with a " + string(s.op) + " AdmissionReview; captured at a TLS server",
			Method: captured.Method, Path: captured.URL.Path, Headers: headers, Body: string(capturedBody),
			UpstreamListenerParsed: upstreamParse(captured.URL.Path, capturedBody, cliPem),
		}
		write(outDir, out)
		fmt.Println(s.name, captured.Method, captured.URL.Path, string(capturedBody))
	}
}

// upstreamParse feeds a request to the upstream listener library, with the XFCC header Istio would set.
func upstreamParse(path string, body, cliPem []byte) map[string]any {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("X-Forwarded-Client-Cert", "Cert="+url.QueryEscape(string(cliPem)))
	parsedEvent, unmarshalErr := listenerEvent.UnmarshalSKREvent(req)
	if unmarshalErr != nil {
		panic(unmarshalErr.Message)
	}
	parsedJSON, err := json.Marshal(listenerEvent.UnstructuredContent(parsedEvent))
	must(err)
	var parsed map[string]any
	must(json.Unmarshal(parsedJSON, &parsed))
	return parsed
}

func write(outDir string, out recorded) {
	data, err := json.MarshalIndent(out, "", "  ")
	must(err)
	must(os.WriteFile(filepath.Join(outDir, out.Scenario+".json"), append(data, '\n'), 0o644))
}
