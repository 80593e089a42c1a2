/* The bare probe floor of bench-live.sh: an empty program, attached as uprobe
 * and uretprobe at the offsets heaptrace probes, so the cost measured is the
 * trap plus running a BPF program, nothing else. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("uprobe")
int floor_empty(void *ctx)
{
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
