// Command webhook is the Go standard-library floor for bench/bench_webhook.py: a mutating
// admission webhook over TLS doing the wire work migfit's does for one pod. It decodes the
// AdmissionReview into typed structs, reads the migfit.io/gpu-memory annotation (and
// kubectl's default-container one), parses the quantity, picks the smallest profile of a
// table that fits, builds the RFC 6902 patch (resources in limits and requests, the
// migfit.io/profile and migfit.io/decision annotations), base64-encodes it and answers with
// an AdmissionReview. Standard library only; built and run by the bench:
//
//	webhook -addr 127.0.0.1:PORT -cert tls.crt -key tls.key
package main

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

type admissionReview struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Request    *admissionRequest  `json:"request,omitempty"`
	Response   *admissionResponse `json:"response,omitempty"`
}

type admissionRequest struct {
	UID       string `json:"uid"`
	Operation string `json:"operation"`
	Kind      struct {
		Kind string `json:"kind"`
	} `json:"kind"`
	SubResource string `json:"subResource"`
	Object      *pod   `json:"object"`
}

type admissionResponse struct {
	UID       string   `json:"uid"`
	Allowed   bool     `json:"allowed"`
	PatchType string   `json:"patchType,omitempty"`
	Patch     string   `json:"patch,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
	Status    *status  `json:"status,omitempty"`
}

type status struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type pod struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Containers []container `json:"containers"`
	} `json:"spec"`
}

type container struct {
	Name      string `json:"name"`
	Resources struct {
		Limits   map[string]string `json:"limits"`
		Requests map[string]string `json:"requests"`
	} `json:"resources"`
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

type decisionContainer struct {
	Container  string   `json:"container"`
	RequestMiB int64    `json:"request_mib"`
	Profile    string   `json:"profile"`
	Resource   string   `json:"resource"`
	Models     []string `json:"models"`
}

type decisionRecord struct {
	V          int                 `json:"v"`
	Strategy   string              `json:"strategy"`
	Containers []decisionContainer `json:"containers"`
}

type profile struct {
	name      string
	memoryMiB int64
}

// The MIG profiles of the example cluster's models, smallest memory first.
var profiles = func() []profile {
	p := []profile{
		{"1g.5gb", 4864}, {"1g.10gb", 9728}, {"2g.10gb", 9728}, {"1g.12gb", 11264},
		{"1g.18gb", 16384}, {"1g.20gb", 19968}, {"2g.20gb", 19968}, {"3g.20gb", 19968},
		{"2g.24gb", 22528}, {"1g.23gb", 21504}, {"2g.35gb", 33280}, {"3g.40gb", 40192},
		{"4g.40gb", 40192}, {"3g.47gb", 46592}, {"4g.71gb", 70144}, {"7g.80gb", 80896},
		{"7g.141gb", 140800},
	}
	sort.SliceStable(p, func(i, j int) bool { return p[i].memoryMiB < p[j].memoryMiB })
	return p
}()

var units = map[string]int64{
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
	"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "": 1,
}

func mib(q string) (int64, error) {
	i := strings.IndexFunc(q, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, suffix := q, ""
	if i >= 0 {
		num, suffix = q[:i], q[i:]
	}
	unit, ok := units[suffix]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q", suffix)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, err
	}
	bytes := v * float64(unit)
	return int64((bytes + (1<<20 - 1)) / (1 << 20)), nil
}

func escape(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}

func decide(req *admissionRequest) *admissionResponse {
	resp := &admissionResponse{UID: req.UID, Allowed: true}
	if req.Operation != "CREATE" || req.Kind.Kind != "Pod" || req.SubResource != "" || req.Object == nil {
		return resp
	}
	p := req.Object
	want, ok := p.Metadata.Annotations["migfit.io/gpu-memory"]
	if !ok {
		return resp
	}
	index := 0
	if name := p.Metadata.Annotations["kubectl.kubernetes.io/default-container"]; name != "" {
		for i, c := range p.Spec.Containers {
			if c.Name == name {
				index = i
			}
		}
	}
	deny := func(msg string) *admissionResponse {
		resp.Allowed = false
		resp.Status = &status{Code: 403, Message: msg}
		return resp
	}
	if index >= len(p.Spec.Containers) {
		return deny("the pod has no container")
	}
	need, err := mib(want)
	if err != nil {
		return deny(err.Error())
	}
	chosen := ""
	for _, pr := range profiles {
		if pr.memoryMiB >= need {
			chosen = pr.name
			break
		}
	}
	if chosen == "" {
		return deny("no MIG profile has " + want)
	}
	c := p.Spec.Containers[index]
	resource := "nvidia.com/mig-" + chosen
	record, _ := json.Marshal(decisionRecord{V: 1, Strategy: "mixed", Containers: []decisionContainer{
		{Container: c.Name, RequestMiB: need, Profile: chosen, Resource: resource, Models: []string{}}}})
	base := "/spec/containers/" + strconv.Itoa(index) + "/resources/"
	ops := []patchOp{
		{Op: "add", Path: base + "limits/" + escape(resource), Value: "1"},
		{Op: "add", Path: base + "requests/" + escape(resource), Value: "1"},
		{Op: "add", Path: "/metadata/annotations/" + escape("migfit.io/profile"), Value: chosen},
		{Op: "add", Path: "/metadata/annotations/" + escape("migfit.io/decision"), Value: string(record)},
	}
	patch, _ := json.Marshal(ops)
	resp.PatchType = "JSONPatch"
	resp.Patch = base64.StdEncoding.EncodeToString(patch)
	return resp
}

func mutate(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil || review.Request.UID == "" {
		http.Error(w, `{"error":"not an AdmissionReview"}`, http.StatusBadRequest)
		return
	}
	out, _ := json.Marshal(admissionReview{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview",
		Response: decide(review.Request)})
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8443", "listen address")
	cert := flag.String("cert", "", "TLS certificate (PEM)")
	key := flag.String("key", "", "TLS key (PEM)")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", mutate)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ready":true,"clusterView":"synced"}`))
	})
	// Clients that close mid-handshake (wrk stopping) are not worth a log line.
	srv := &http.Server{Addr: *addr, Handler: mux, ErrorLog: log.New(io.Discard, "", 0)}
	log.Fatal(srv.ListenAndServeTLS(*cert, *key))
}
