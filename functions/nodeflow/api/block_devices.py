"""The block devices a node of an EC2NodeClass launches with, and which of them holds its ephemeral storage.

One answer for the launch template and for the instance types' ``ephemeral-storage``, so what is planned is
what is launched. As the AWS provider decides (v1.14.1, the AMI families' default mappings and the
instance types' ephemeral storage):

launched volumes
    ``spec.blockDeviceMappings`` when it has entries, exactly as written (an AMI family's defaults are never
    merged in); otherwise the AMI family's defaults, each an encrypted gp3 volume: AL2 and AL2023 a 20Gi
    ``/dev/xvda``; Bottlerocket a 4Gi ``/dev/xvda`` (its OS) and a 20Gi ``/dev/xvdb`` (its data volume);
    the Windows families a 50Gi ``/dev/sda1``; Custom none (the AMI's own volumes). ``instanceStorePolicy``
    does not change them. The defaults are applied at launch, never written into the spec, so they are not
    part of the EC2NodeClass hash: a class without mappings keeps its hash, and its nodes do not drift.
ephemeral volume
    The size the kubelet's root directory gets (before ``instanceStorePolicy: RAID0``, which counts the
    instance store instead when the type has one): with mappings, the one marked ``rootVolume`` if it has
    a size; else, for Custom, the last mapping's size (20Gi without one); else the mapping on the family's
    ephemeral device (``/dev/xvda``; Bottlerocket ``/dev/xvdb``; Windows ``/dev/sda1``) if it has a size;
    else, as without mappings, the size of the family's default volume on that device (20Gi for Custom).
    ``rootVolume`` only says which volume is counted; it is not an EC2 setting and is not sent.

Must not touch: the launch template itself (``nodeflow.aws.ec2.launch_template_data``) or the instance types' storage
beyond the answer given here; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nodeflow.api.karpenter_ec2 import BlockDevice, BlockDeviceMapping

__all__ = [
    "DEFAULT_VOLUME_BYTES",
    "default_block_device_mappings",
    "ephemeral_device",
    "ephemeral_volume_bytes",
    "launched_block_device_mappings",
]

GI = 2**30
DEFAULT_VOLUME_BYTES = 20 * GI  # the AWS provider's default EBS volume: 20Gi gp3, encrypted


def _volume(device: str, size: str) -> BlockDeviceMapping:
    return BlockDeviceMapping(device_name=device, ebs=BlockDevice(encrypted=True, volume_type="gp3", volume_size=size))


_LINUX = (_volume("/dev/xvda", "20Gi"),)
_WINDOWS = (_volume("/dev/sda1", "50Gi"),)
# AMI family -> (its default volumes, the device its ephemeral storage lives on)
_FAMILIES: Mapping[str, tuple[tuple[BlockDeviceMapping, ...], str | None]] = {
    "AL2": (_LINUX, "/dev/xvda"),
    "AL2023": (_LINUX, "/dev/xvda"),
    "Bottlerocket": ((_volume("/dev/xvda", "4Gi"), _volume("/dev/xvdb", "20Gi")), "/dev/xvdb"),
    "Windows2019": (_WINDOWS, "/dev/sda1"),
    "Windows2022": (_WINDOWS, "/dev/sda1"),
    "Windows2025": (_WINDOWS, "/dev/sda1"),
    "Custom": ((), None),
}


def _family(ami_family: str) -> tuple[tuple[BlockDeviceMapping, ...], str | None]:
    try:
        return _FAMILIES[ami_family]
    except KeyError:
        raise ValueError(f"unknown amiFamily {ami_family!r}; expected one of {', '.join(_FAMILIES)}") from None


def default_block_device_mappings(ami_family: str) -> tuple[BlockDeviceMapping, ...]:
    """The volumes ``ami_family``'s nodes get when the EC2NodeClass has no ``blockDeviceMappings``."""
    return _family(ami_family)[0]


def ephemeral_device(ami_family: str) -> str | None:
    """The device ``ami_family`` keeps the kubelet's root directory on (None for Custom: unknown)."""
    return _family(ami_family)[1]


def launched_block_device_mappings(
    ami_family: str, mappings: Sequence[BlockDeviceMapping] | None
) -> tuple[BlockDeviceMapping, ...]:
    """The block device mappings a node's launch template carries: the spec's, or the family's defaults."""
    return tuple(mappings) if mappings else default_block_device_mappings(ami_family)


def _size(mapping: BlockDeviceMapping | None) -> int | None:
    return mapping.ebs.volume_size_bytes if mapping is not None and mapping.ebs is not None else None


def ephemeral_volume_bytes(ami_family: str, mappings: Sequence[BlockDeviceMapping] | None) -> int:
    """Bytes of the volume that holds the node's ephemeral storage (see the module docstring)."""
    defaults, device = _family(ami_family)
    if mappings:
        if (size := _size(next((m for m in mappings if m.root_volume), None))) is not None:
            return size
        if device is None:  # Custom: which volume the AMI mounts is unknown; the AWS provider takes the last
            return _size(mappings[-1]) or DEFAULT_VOLUME_BYTES
        if (size := _size(next((m for m in mappings if m.device_name == device), None))) is not None:
            return size
    return _size(next((m for m in defaults if m.device_name == device), None)) or DEFAULT_VOLUME_BYTES
