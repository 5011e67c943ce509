"""Well-known label, taint and annotation keys of Karpenter v1 and Kubernetes.

Must not touch: what any key means to a decision; these are names only.
"""

from __future__ import annotations

# Kubernetes well-known labels.
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_ARCH = "kubernetes.io/arch"
LABEL_OS = "kubernetes.io/os"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_INSTANCE_TYPE_BETA = "beta.kubernetes.io/instance-type"
LABEL_ARCH_BETA = "beta.kubernetes.io/arch"
LABEL_OS_BETA = "beta.kubernetes.io/os"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_ZONE_BETA = "failure-domain.beta.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_REGION_BETA = "failure-domain.beta.kubernetes.io/region"
LABEL_WINDOWS_BUILD = "node.kubernetes.io/windows-build"
LABEL_EBS_CSI_ZONE = "topology.ebs.csi.aws.com/zone"

# Karpenter core (karpenter.sh).
GROUP = "karpenter.sh"
LABEL_NODEPOOL = "karpenter.sh/nodepool"
LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"
LABEL_INITIALIZED = "karpenter.sh/initialized"
LABEL_REGISTERED = "karpenter.sh/registered"
LABEL_NODECLAIM = "karpenter.sh/nodeclaim"
ANNOTATION_DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
ANNOTATION_NODEPOOL_HASH = "karpenter.sh/nodepool-hash"
ANNOTATION_NODEPOOL_HASH_VERSION = "karpenter.sh/nodepool-hash-version"
ANNOTATION_NODECLAIM_MIN_VALUES_RELAXED = "karpenter.sh/nodeclaim-min-values-relaxed"
TAINT_DISRUPTED = "karpenter.sh/disrupted"
TAINT_UNREGISTERED = "karpenter.sh/unregistered"
FINALIZER_TERMINATION = "karpenter.sh/termination"
# On every EC2NodeClass (as Karpenter's AWS provider): kept until its NodeClaims and launch templates are gone.
FINALIZER_EC2NODECLASS = "karpenter.k8s.aws/termination"
# The time a terminating NodeClaim's drain ends: its deletionTimestamp + spec.terminationGracePeriod (RFC 3339).
ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP = "karpenter.sh/nodeclaim-termination-timestamp"
# A node being drained leaves external load balancers (Karpenter sets it to "karpenter").
LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS = "node.kubernetes.io/exclude-from-external-load-balancers"
# Static pods' mirror objects: read-only, never evicted.
ANNOTATION_MIRROR_POD = "kubernetes.io/config.mirror"
# nodeflow's own: the pods (namespace/name, JSON list) a NodeClaim was created for. While the
# NodeClaim is not initialized those pods count as placed on it, so no batch provisions them twice.
ANNOTATION_NOMINATED_PODS = "nodeflow.io/nominated-pods"
# Where the instance behind a NodeClaim was launched (written by Launch; subnet and security-group
# drift are judged on these).
ANNOTATION_SUBNET_ID = "nodeflow.io/subnet-id"
ANNOTATION_SECURITY_GROUP_IDS = "nodeflow.io/security-group-ids"  # comma-separated
ANNOTATION_EC2NODECLASS_HASH = "karpenter.k8s.aws/ec2nodeclass-hash"
ANNOTATION_EC2NODECLASS_HASH_VERSION = "karpenter.k8s.aws/ec2nodeclass-hash-version"
# nodeflow's own: the id of the event batch that created a NodeClaim.
ANNOTATION_BATCH = "nodeflow.io/batch"
# Taints a node carries only while it comes up (not held against pods for nodes not yet
# initialized; an initialized node has none of them).
EPHEMERAL_TAINTS = frozenset(
    {
        TAINT_UNREGISTERED,
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.cloudprovider.kubernetes.io/uninitialized",
    }
)
CAPACITY_TYPE_SPOT = "spot"
CAPACITY_TYPE_ON_DEMAND = "on-demand"
CAPACITY_TYPE_RESERVED = "reserved"

# Karpenter AWS provider (karpenter.k8s.aws).
AWS_GROUP = "karpenter.k8s.aws"
LABEL_EC2NODECLASS = "karpenter.k8s.aws/ec2nodeclass"
LABEL_ZONE_ID = "topology.k8s.aws/zone-id"
LABEL_INSTANCE_HYPERVISOR = "karpenter.k8s.aws/instance-hypervisor"
LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT = "karpenter.k8s.aws/instance-encryption-in-transit-supported"
LABEL_INSTANCE_CATEGORY = "karpenter.k8s.aws/instance-category"
LABEL_INSTANCE_FAMILY = "karpenter.k8s.aws/instance-family"
LABEL_INSTANCE_GENERATION = "karpenter.k8s.aws/instance-generation"
LABEL_INSTANCE_LOCAL_NVME = "karpenter.k8s.aws/instance-local-nvme"
LABEL_INSTANCE_SIZE = "karpenter.k8s.aws/instance-size"
LABEL_INSTANCE_CPU = "karpenter.k8s.aws/instance-cpu"
LABEL_INSTANCE_CPU_MANUFACTURER = "karpenter.k8s.aws/instance-cpu-manufacturer"
LABEL_INSTANCE_CPU_SUSTAINED_CLOCK = "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz"
LABEL_INSTANCE_MEMORY = "karpenter.k8s.aws/instance-memory"
LABEL_INSTANCE_EBS_BANDWIDTH = "karpenter.k8s.aws/instance-ebs-bandwidth"
LABEL_INSTANCE_NETWORK_BANDWIDTH = "karpenter.k8s.aws/instance-network-bandwidth"
LABEL_INSTANCE_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
LABEL_INSTANCE_GPU_MANUFACTURER = "karpenter.k8s.aws/instance-gpu-manufacturer"
LABEL_INSTANCE_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
LABEL_INSTANCE_GPU_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"
LABEL_INSTANCE_ACCELERATOR_NAME = "karpenter.k8s.aws/instance-accelerator-name"
LABEL_INSTANCE_ACCELERATOR_MANUFACTURER = "karpenter.k8s.aws/instance-accelerator-manufacturer"
LABEL_INSTANCE_ACCELERATOR_COUNT = "karpenter.k8s.aws/instance-accelerator-count"
LABEL_INSTANCE_CAPABILITY_FLEX = "karpenter.k8s.aws/instance-capability-flex"
# A node launched into an EC2 capacity reservation (capacity type "reserved"): its id, its type
# ("default" | "capacity-block") and whether it is interruptible ("true" | "false").
LABEL_CAPACITY_RESERVATION_ID = "karpenter.k8s.aws/capacity-reservation-id"
LABEL_CAPACITY_RESERVATION_TYPE = "karpenter.k8s.aws/capacity-reservation-type"
LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE = "karpenter.k8s.aws/capacity-reservation-interruptible"

# Extended resources advertised by device plugins on EC2.
RESOURCE_NVIDIA_GPU = "nvidia.com/gpu"
RESOURCE_AMD_GPU = "amd.com/gpu"
RESOURCE_AWS_NEURON = "aws.amazon.com/neuron"
RESOURCE_AWS_NEURON_CORE = "aws.amazon.com/neuroncore"
RESOURCE_HABANA_GAUDI = "habana.ai/gaudi"
RESOURCE_EFA = "vpc.amazonaws.com/efa"
# Nitro Enclave slots (a NodeOverlay gives instance types the capacity): a NodeClaim that requests them is launched
# with Nitro Enclaves enabled, as Karpenter's AWS provider does.
RESOURCE_NIP_SLOTS = "eks.amazonaws.com/nip-slots"
RESOURCE_POD_ENI = "vpc.amazonaws.com/pod-eni"
RESOURCE_PRIVATE_IPV4 = "vpc.amazonaws.com/PrivateIPv4Address"

# Label domains reserved for Karpenter (RestrictedLabelDomains of Karpenter v1 and its AWS provider):
# neither a NodePool nor a pod may use a label under them, but for the well-known labels. (Karpenter
# v1 no longer reserves kubernetes.io and k8s.io: a NodePool may set e.g. ``team.kubernetes.io/x``.)
RESTRICTED_LABEL_DOMAINS = frozenset({"karpenter.sh", "karpenter.k8s.aws"})
# Labels under restricted domains that NodePools may still use in requirements.
WELL_KNOWN_LABELS = frozenset(
    {
        LABEL_NODEPOOL,
        LABEL_ZONE,
        LABEL_REGION,
        LABEL_INSTANCE_TYPE,
        LABEL_ARCH,
        LABEL_OS,
        LABEL_CAPACITY_TYPE,
        LABEL_WINDOWS_BUILD,
        LABEL_ZONE_ID,
        LABEL_INSTANCE_HYPERVISOR,
        LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT,
        LABEL_INSTANCE_CATEGORY,
        LABEL_INSTANCE_FAMILY,
        LABEL_INSTANCE_GENERATION,
        LABEL_INSTANCE_LOCAL_NVME,
        LABEL_INSTANCE_SIZE,
        LABEL_INSTANCE_CPU,
        LABEL_INSTANCE_CPU_MANUFACTURER,
        LABEL_INSTANCE_CPU_SUSTAINED_CLOCK,
        LABEL_INSTANCE_MEMORY,
        LABEL_INSTANCE_EBS_BANDWIDTH,
        LABEL_INSTANCE_NETWORK_BANDWIDTH,
        LABEL_INSTANCE_GPU_NAME,
        LABEL_INSTANCE_GPU_MANUFACTURER,
        LABEL_INSTANCE_GPU_COUNT,
        LABEL_INSTANCE_GPU_MEMORY,
        LABEL_INSTANCE_ACCELERATOR_NAME,
        LABEL_INSTANCE_ACCELERATOR_MANUFACTURER,
        LABEL_INSTANCE_ACCELERATOR_COUNT,
        LABEL_INSTANCE_CAPABILITY_FLEX,
        LABEL_CAPACITY_RESERVATION_ID,
        LABEL_CAPACITY_RESERVATION_TYPE,
        LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
    }
)
# Aliases normalised to their standard label (the EBS CSI zone label is the zone).
NORMALIZED_LABELS = {
    LABEL_ZONE_BETA: LABEL_ZONE,
    LABEL_REGION_BETA: LABEL_REGION,
    LABEL_ARCH_BETA: LABEL_ARCH,
    LABEL_OS_BETA: LABEL_OS,
    LABEL_INSTANCE_TYPE_BETA: LABEL_INSTANCE_TYPE,
    LABEL_EBS_CSI_ZONE: LABEL_ZONE,
}
# Labels a NodePool's template may not set at all.
RESTRICTED_LABELS = frozenset({LABEL_HOSTNAME, LABEL_NODEPOOL, LABEL_REGISTERED, LABEL_INITIALIZED})


def label_domain(key: str) -> str:
    """The DNS prefix of a label key ("" when it has none)."""
    return key.split("/", 1)[0] if "/" in key else ""


def is_restricted_label(key: str) -> bool:
    """True when a NodePool may not set this label nor a pod select on it (Karpenter's IsRestrictedLabel)."""
    if key in WELL_KNOWN_LABELS:
        return False
    if key in RESTRICTED_LABELS:
        return True
    domain = label_domain(key)
    return any(domain == d or domain.endswith("." + d) for d in RESTRICTED_LABEL_DOMAINS)
