//! Host NUMA topology objects: NUMATopology 1.2 with NUMACell 1.5, NUMAPagesTopology 1.1 and
//! NetworkMetadata 1.0 (nova/objects/numa.py, network_metadata.py). A ComputeNode carries the
//! topology as the JSON text of its primitive in the `numa_topology` string field.
//!
//! In: the host's NUMA cells, CPUs, memory and page pools as the tracker's `NodeTemplate` sets them
//! (or a NUMATopology primitive, 1.0 to 1.2). Out: a [`NUMATopology`] whose primitive, as JSON
//! text, is the ComputeNode's `numa_topology`; cells and their children backported per the
//! manifest.

use serde_json::{Map, Value};

use super::base::{Manifest, NovaObject, ObjVersion, ObjectError, Reader, Writer};
use super::fields::{
    backport_child, older, Bool, Int, ListInt, ListListInt, ListObj, ListStr, Obj,
};

crate::nova_object_fields! {
    /// NUMATopology: the host's cells.
    pub struct NUMATopology {
        /// Nova's `cells`: the host's NUMA cells, each with its CPUs, memory and page pools.
        cells: req ListObj<NUMACell>,
    }
}

impl NovaObject for NUMATopology {
    const NAME: &'static str = "NUMATopology";
    const VERSION: ObjVersion = ObjVersion::new(1, 2);
    fn decode(r: &mut Reader<'_>) -> Result<Self, ObjectError> {
        Self::decode_fields(r)
    }
    fn encode(&self, w: &mut Writer) -> Result<(), ObjectError> {
        self.encode_fields(w)
    }
    fn make_compatible(
        data: &mut Map<String, Value>,
        _: ObjVersion,
        m: Option<&Manifest>,
    ) -> Result<(), ObjectError> {
        backport_child::<NUMACell>(data, "cells", Self::NAME, m)
    }
}

crate::nova_object_fields! {
    /// NUMACell: one host NUMA node.
    pub struct NUMACell {
        /// Node id.
        id: req Int,
        /// CPUs for floating instances.
        cpuset: req ListInt,
        /// CPUs for pinned instances (1.4).
        pcpuset: req ListInt,
        /// Memory in MiB.
        memory: req Int,
        /// CPUs in use by floating instances.
        cpu_usage: req Int,
        /// Memory in use, MiB.
        memory_usage: req Int,
        /// Pinned CPUs.
        pinned_cpus: req ListInt,
        /// Thread sibling sets.
        siblings: req ListListInt,
        /// Page pools (1.2).
        mempages: req ListObj<NUMAPagesTopology>,
        /// Physnets and tunneled networks local to the cell (1.3).
        network_metadata: req Obj<NetworkMetadata>,
        /// Socket (1.5).
        socket: opt Int,
    }
}

impl NovaObject for NUMACell {
    const NAME: &'static str = "NUMACell";
    const VERSION: ObjVersion = ObjVersion::new(1, 5);
    fn decode(r: &mut Reader<'_>) -> Result<Self, ObjectError> {
        Self::decode_fields(r)
    }
    fn encode(&self, w: &mut Writer) -> Result<(), ObjectError> {
        self.encode_fields(w)
    }
    fn make_compatible(
        data: &mut Map<String, Value>,
        target: ObjVersion,
        m: Option<&Manifest>,
    ) -> Result<(), ObjectError> {
        backport_child::<NUMAPagesTopology>(data, "mempages", Self::NAME, m)?;
        backport_child::<NetworkMetadata>(data, "network_metadata", Self::NAME, m)?;
        if older(target, 1, 5) {
            data.remove("socket");
        }
        if older(target, 1, 4) {
            data.remove("pcpuset");
        }
        if older(target, 1, 3) {
            data.remove("network_metadata");
        }
        Ok(())
    }
}

crate::nova_object_fields! {
    /// NUMAPagesTopology: a page-size pool of a cell.
    pub struct NUMAPagesTopology {
        /// Page size in KiB.
        size_kb: req Int,
        /// Nova's `total`: pages of this size in the cell.
        total: req Int,
        /// Pages used.
        used: req Int,
        /// Pages reserved (1.1).
        reserved: req Int,
    }
}

impl NovaObject for NUMAPagesTopology {
    const NAME: &'static str = "NUMAPagesTopology";
    const VERSION: ObjVersion = ObjVersion::new(1, 1);
    fn decode(r: &mut Reader<'_>) -> Result<Self, ObjectError> {
        Self::decode_fields(r)
    }
    fn encode(&self, w: &mut Writer) -> Result<(), ObjectError> {
        self.encode_fields(w)
    }
    fn make_compatible(
        data: &mut Map<String, Value>,
        target: ObjVersion,
        _: Option<&Manifest>,
    ) -> Result<(), ObjectError> {
        if older(target, 1, 1) {
            data.remove("reserved");
        }
        Ok(())
    }
}

crate::nova_object_fields! {
    /// NetworkMetadata: physnets and whether tunneled networks are reachable.
    pub struct NetworkMetadata {
        /// Physical networks (a set).
        physnets: req ListStr,
        /// Tunneled (L3) networks.
        tunneled: req Bool,
    }
}

impl NovaObject for NetworkMetadata {
    const NAME: &'static str = "NetworkMetadata";
    const VERSION: ObjVersion = ObjVersion::new(1, 0);
    fn decode(r: &mut Reader<'_>) -> Result<Self, ObjectError> {
        Self::decode_fields(r)
    }
    fn encode(&self, w: &mut Writer) -> Result<(), ObjectError> {
        self.encode_fields(w)
    }
}
