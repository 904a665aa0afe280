// Command extender is the Go standard-library floor for bench/bench_extender.py: a
// kube-scheduler extender (k8s.io/kube-scheduler/extender/v1 wire format) doing the wire work
// migfit's does. At start it reads the per-node figures the bench computed from its synthetic
// cluster (free and advertised instances per MIG resource, memory slices, cpu and memory
// allocatable and in use, cluster-wide pending demand); then over keep-alive HTTP:
//
//   - POST /filter decodes ExtenderArgs into typed structs (the Pod, and in full Nodes mode
//     every v1.Node field the bench's nodes carry), reads the pod's nvidia.com/mig-* request,
//     and answers an ExtenderFilterResult: NodeNames in, names out; Nodes in, the passing
//     Node objects out (re-encoded from the typed structs); FailedNodes and
//     FailedAndUnresolvableNodes with a message per node.
//   - POST /prioritize answers a HostPriorityList, an integer score 0..10 per node from a few
//     per-node terms (memory slices packed, host cpu/memory share, stranding, scarcity).
//
// Standard library only; built and run by the bench:
//
//	extender -addr 127.0.0.1:PORT -figures figures.json
package main

import (
	"encoding/json"
	"flag"
	"hash/crc32"
	"io"
	"log"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
)

// ---------------------------------------------------------------- the cluster's figures

type nodeFile struct {
	Name        string           `json:"name"`
	Schedulable bool             `json:"schedulable"`    // counts in the cluster-wide supply
	Busy        bool             `json:"repartitioning"` // its MIG layout is being changed
	Alloc       map[string]int64 `json:"alloc"`          // advertised instances per resource
	Free        map[string]int64 `json:"free"`           // free instances per resource
	Slices      map[string]int64 `json:"slices"`         // memory slices of one instance
	TotalSlices int64            `json:"total_slices"`
	UsedSlices  int64            `json:"used_slices"`
	CPUAllocM   int64            `json:"cpu_alloc_m"`
	MemAlloc    int64            `json:"mem_alloc"`
	CPUUsedM    int64            `json:"cpu_used_m"`
	MemUsed     int64            `json:"mem_used"`
}

type figuresFile struct {
	Nodes  []nodeFile       `json:"nodes"`
	Demand map[string]int64 `json:"demand"` // instances pending pods want, per resource
}

type node struct {
	nodeFile
	tie        float64
	advertised string // "2 1g.10gb, 1 3g.40gb", for messages
}

type cluster struct {
	nodes  map[string]*node
	supply map[string]int64 // free instances on schedulable nodes, per resource
	demand map[string]int64
}

func load(path string) (*cluster, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f figuresFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, err
	}
	c := &cluster{nodes: make(map[string]*node, len(f.Nodes)), supply: map[string]int64{},
		demand: f.Demand}
	for _, nf := range f.Nodes {
		n := &node{nodeFile: nf, tie: float64(crc32.ChecksumIEEE([]byte(nf.Name))) / (1 << 32)}
		res := make([]string, 0, len(nf.Alloc))
		for r := range nf.Alloc {
			res = append(res, r)
		}
		sort.Strings(res)
		parts := make([]string, 0, len(res))
		for _, r := range res {
			parts = append(parts, strconv.FormatInt(nf.Alloc[r], 10)+" "+profileOf(r))
			if nf.Schedulable {
				c.supply[r] += nf.Free[r]
			}
		}
		n.advertised = strings.Join(parts, ", ")
		c.nodes[nf.Name] = n
	}
	return c, nil
}

func profileOf(resource string) string {
	return strings.TrimPrefix(resource, "nvidia.com/mig-")
}

// ---------------------------------------------------------------- the wire: typed structs

type ownerReference struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	UID                string `json:"uid"`
	Controller         *bool  `json:"controller,omitempty"`
	BlockOwnerDeletion *bool  `json:"blockOwnerDeletion,omitempty"`
}

type managedFieldsEntry struct {
	Manager     string          `json:"manager,omitempty"`
	Operation   string          `json:"operation,omitempty"`
	APIVersion  string          `json:"apiVersion,omitempty"`
	Time        string          `json:"time,omitempty"`
	FieldsType  string          `json:"fieldsType,omitempty"`
	FieldsV1    json.RawMessage `json:"fieldsV1,omitempty"`
	Subresource string          `json:"subresource,omitempty"`
}

type objectMeta struct {
	Name              string               `json:"name,omitempty"`
	GenerateName      string               `json:"generateName,omitempty"`
	Namespace         string               `json:"namespace,omitempty"`
	UID               string               `json:"uid,omitempty"`
	ResourceVersion   string               `json:"resourceVersion,omitempty"`
	Generation        int64                `json:"generation,omitempty"`
	CreationTimestamp string               `json:"creationTimestamp,omitempty"`
	DeletionTimestamp *string              `json:"deletionTimestamp,omitempty"`
	Labels            map[string]string    `json:"labels,omitempty"`
	Annotations       map[string]string    `json:"annotations,omitempty"`
	OwnerReferences   []ownerReference     `json:"ownerReferences,omitempty"`
	Finalizers        []string             `json:"finalizers,omitempty"`
	ManagedFields     []managedFieldsEntry `json:"managedFields,omitempty"`
}

type resources struct {
	Limits   map[string]string `json:"limits,omitempty"`
	Requests map[string]string `json:"requests,omitempty"`
}

type container struct {
	Name      string    `json:"name"`
	Image     string    `json:"image,omitempty"`
	Resources resources `json:"resources"`
}

type pod struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		NodeName       string      `json:"nodeName,omitempty"`
		SchedulerName  string      `json:"schedulerName,omitempty"`
		InitContainers []container `json:"initContainers,omitempty"`
		Containers     []container `json:"containers"`
	} `json:"spec"`
}

type taint struct {
	Key       string  `json:"key"`
	Value     string  `json:"value,omitempty"`
	Effect    string  `json:"effect"`
	TimeAdded *string `json:"timeAdded,omitempty"`
}

type nodeCondition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	LastHeartbeatTime  string `json:"lastHeartbeatTime,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
	Reason             string `json:"reason,omitempty"`
	Message            string `json:"message,omitempty"`
}

type nodeAddress struct {
	Type    string `json:"type"`
	Address string `json:"address"`
}

type containerImage struct {
	Names     []string `json:"names"`
	SizeBytes int64    `json:"sizeBytes,omitempty"`
}

type v1Node struct {
	APIVersion string     `json:"apiVersion,omitempty"`
	Kind       string     `json:"kind,omitempty"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		PodCIDR       string   `json:"podCIDR,omitempty"`
		PodCIDRs      []string `json:"podCIDRs,omitempty"`
		ProviderID    string   `json:"providerID,omitempty"`
		Unschedulable bool     `json:"unschedulable,omitempty"`
		Taints        []taint  `json:"taints,omitempty"`
	} `json:"spec"`
	Status struct {
		Capacity        map[string]string `json:"capacity,omitempty"`
		Allocatable     map[string]string `json:"allocatable,omitempty"`
		Phase           string            `json:"phase,omitempty"`
		Conditions      []nodeCondition   `json:"conditions,omitempty"`
		Addresses       []nodeAddress     `json:"addresses,omitempty"`
		DaemonEndpoints struct {
			KubeletEndpoint struct {
				Port int32 `json:"Port"`
			} `json:"kubeletEndpoint"`
		} `json:"daemonEndpoints"`
		NodeInfo struct {
			MachineID               string `json:"machineID"`
			SystemUUID              string `json:"systemUUID"`
			BootID                  string `json:"bootID"`
			KernelVersion           string `json:"kernelVersion"`
			OSImage                 string `json:"osImage"`
			ContainerRuntimeVersion string `json:"containerRuntimeVersion"`
			KubeletVersion          string `json:"kubeletVersion"`
			KubeProxyVersion        string `json:"kubeProxyVersion"`
			OperatingSystem         string `json:"operatingSystem"`
			Architecture            string `json:"architecture"`
		} `json:"nodeInfo"`
		Images       []containerImage `json:"images,omitempty"`
		VolumesInUse []string         `json:"volumesInUse,omitempty"`
	} `json:"status"`
}

type nodeList struct {
	Kind       string `json:"kind,omitempty"`
	APIVersion string `json:"apiVersion,omitempty"`
	Metadata   struct {
		ResourceVersion string `json:"resourceVersion,omitempty"`
	} `json:"metadata"`
	Items []v1Node `json:"items"`
}

type extenderArgs struct {
	Pod       *pod      `json:"Pod"`
	Nodes     *nodeList `json:"Nodes"`
	NodeNames *[]string `json:"NodeNames"`
}

type filterResult struct {
	Nodes                      *nodeList         `json:"Nodes"`
	NodeNames                  *[]string         `json:"NodeNames"`
	FailedNodes                map[string]string `json:"FailedNodes"`
	FailedAndUnresolvableNodes map[string]string `json:"FailedAndUnresolvableNodes"`
	Error                      string            `json:"Error"`
}

type hostPriority struct {
	Host  string `json:"Host"`
	Score int64  `json:"Score"`
}

// ---------------------------------------------------------------- the pod's request

var suffixes = map[string]float64{
	"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
}

// quantity parses a Kubernetes quantity ("100m", "4", "32Gi") into base units.
func quantity(q string) float64 {
	i := strings.IndexFunc(q, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, suffix := q, ""
	if i >= 0 {
		num, suffix = q[:i], q[i:]
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0
	}
	return v * suffixes[suffix]
}

type request struct {
	mig  map[string]int64
	cpuM int64
	mem  int64
}

func (r *request) add(c container, into map[string]int64, cpuM, mem *int64) {
	for name, v := range c.Resources.Limits {
		if strings.HasPrefix(name, "nvidia.com/mig-") {
			into[name] += int64(quantity(v))
		}
	}
	for name, v := range c.Resources.Requests {
		if _, limited := c.Resources.Limits[name]; strings.HasPrefix(name, "nvidia.com/mig-") && !limited {
			into[name] += int64(quantity(v))
		}
	}
	get := func(name string) string {
		if v, ok := c.Resources.Requests[name]; ok {
			return v
		}
		return c.Resources.Limits[name]
	}
	*cpuM += int64(math.Ceil(quantity(get("cpu")) * 1000))
	*mem += int64(quantity(get("memory")))
}

// max64 is the larger of a and b (the built-in max needs Go 1.21; Debian 12 ships 1.19).
func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// requestOf is the pod's effective request: containers summed, the max with each init one.
func requestOf(p *pod) request {
	r := request{mig: map[string]int64{}}
	for _, c := range p.Spec.Containers {
		r.add(c, r.mig, &r.cpuM, &r.mem)
	}
	for _, c := range p.Spec.InitContainers {
		one := map[string]int64{}
		var cpuM, mem int64
		r.add(c, one, &cpuM, &mem)
		for k, v := range one {
			r.mig[k] = max64(r.mig[k], v)
		}
		r.cpuM, r.mem = max64(r.cpuM, cpuM), max64(r.mem, mem)
	}
	return r
}

// ---------------------------------------------------------------- filter and score

// verdict is "" when the node can take the pod, else the message and whether it is
// unresolvable (no preemption can help).
func (c *cluster) verdict(name string, r request) (string, bool) {
	n := c.nodes[name]
	if n == nil {
		return "node is unknown to the extender's cache", true
	}
	if n.Busy {
		return "node's MIG layout is being changed; wait for it to finish", true
	}
	for res, k := range r.mig {
		alloc := n.Alloc[res]
		if alloc == 0 {
			return "node advertises " + n.advertised + " but no " + profileOf(res), true
		}
		if alloc < k {
			return "node advertises " + strconv.FormatInt(alloc, 10) + " " + profileOf(res) +
				" in all; the pod needs " + strconv.FormatInt(k, 10), true
		}
		if free := n.Free[res]; free < k {
			if free == 0 {
				return "every " + profileOf(res) + " instance is in use", false
			}
			return "only " + strconv.FormatInt(free, 10) + " " + profileOf(res) +
				" free; the pod needs " + strconv.FormatInt(k, 10), false
		}
	}
	return "", false
}

func clamp01(v float64) float64 { return math.Min(1, math.Max(0, v)) }

func (c *cluster) score(name string, r request) int64 {
	if msg, _ := c.verdict(name, r); msg != "" || len(r.mig) == 0 {
		return 0
	}
	n := c.nodes[name]
	var want int64
	scarce := 0.0
	for res, k := range r.mig {
		want += k * n.Slices[res]
		left := float64(c.supply[res] - k)
		scarce = math.Max(scarce, clamp01((float64(c.demand[res])-left)/float64(k)))
	}
	pack := 1.0
	if n.TotalSlices > 0 {
		pack = clamp01(float64(n.UsedSlices+want) / float64(n.TotalSlices))
	}
	host := 0.0
	if n.CPUAllocM > 0 && n.MemAlloc > 0 {
		host = clamp01(math.Max(float64(n.CPUUsedM+r.cpuM)/float64(n.CPUAllocM),
			float64(n.MemUsed+r.mem)/float64(n.MemAlloc)))
	}
	strand := math.Max(0, host-pack)
	raw := 0.6*(1-strand) + 0.3*(1-host) + 0.1*(1-scarce)
	return int64(math.Max(0, math.Min(10, math.Floor(10*raw+0.5+0.1*(n.tie-0.5)))))
}

// ---------------------------------------------------------------- HTTP

func decode(w http.ResponseWriter, r *http.Request) (*extenderArgs, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, false
	}
	var args extenderArgs
	if err := json.Unmarshal(body, &args); err != nil || args.Pod == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		out, _ := json.Marshal(filterResult{Error: "not an ExtenderArgs"})
		w.Write(out)
		return nil, false
	}
	return &args, true
}

func names(args *extenderArgs) []string {
	if args.NodeNames != nil {
		return *args.NodeNames
	}
	if args.Nodes == nil {
		return nil
	}
	out := make([]string, len(args.Nodes.Items))
	for i := range args.Nodes.Items {
		out[i] = args.Nodes.Items[i].Metadata.Name
	}
	return out
}

func reply(w http.ResponseWriter, v any) {
	out, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

func (c *cluster) filter(w http.ResponseWriter, r *http.Request) {
	args, ok := decode(w, r)
	if !ok {
		return
	}
	req := requestOf(args.Pod)
	res := filterResult{FailedNodes: map[string]string{}, FailedAndUnresolvableNodes: map[string]string{}}
	var passed []string
	var items []v1Node
	for i, name := range names(args) {
		msg, bad := "", false
		if len(req.mig) > 0 {
			msg, bad = c.verdict(name, req)
		}
		switch {
		case msg == "":
			if args.NodeNames != nil {
				passed = append(passed, name)
			} else {
				items = append(items, args.Nodes.Items[i])
			}
		case bad:
			res.FailedAndUnresolvableNodes[name] = msg
		default:
			res.FailedNodes[name] = msg
		}
	}
	if args.NodeNames != nil {
		if passed == nil {
			passed = []string{}
		}
		res.NodeNames = &passed
	} else if args.Nodes != nil {
		out := *args.Nodes
		out.Items = items
		if out.Items == nil {
			out.Items = []v1Node{}
		}
		res.Nodes = &out
	}
	reply(w, res)
}

func (c *cluster) prioritize(w http.ResponseWriter, r *http.Request) {
	args, ok := decode(w, r)
	if !ok {
		return
	}
	req := requestOf(args.Pod)
	all := names(args)
	out := make([]hostPriority, len(all))
	for i, name := range all {
		out[i] = hostPriority{Host: name, Score: c.score(name, req)}
	}
	reply(w, out)
}

// only answers 405 to any other method (what Go 1.22's "POST /path" patterns do; spelled
// out so that the floor builds with older toolchains too, Debian 12's 1.19 among them).
func only(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h(w, r)
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8888", "listen address")
	path := flag.String("figures", "", "the bench's per-node figures (JSON)")
	flag.Parse()
	c, err := load(*path)
	if err != nil {
		log.Fatalf("extender floor: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/filter", only(http.MethodPost, c.filter))
	mux.HandleFunc("/prioritize", only(http.MethodPost, c.prioritize))
	mux.HandleFunc("/readyz", only(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ready":true}`))
	}))
	log.Fatal(http.ListenAndServe(*addr, mux))
}
