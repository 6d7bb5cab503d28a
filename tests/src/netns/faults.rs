//! Faults: isolation and partitions, injected at the switch.
//!
//! [`Cut::Drop`] (the default, used by [`Lab::isolate`] and [`Lab::partition`]) filters at the
//! switch: an ingress `tc` u32 filter on the switch port of each host redirects IPv4 packets
//! addressed to a host of another group into `sink`, a veth whose far end discards them. The
//! hosts notice nothing but silence, like a real partition: connects hang until their own
//! timeout, established connections stall and resume after [`Lab::heal`]. ARP still passes, so
//! healing takes effect at once. Why this and not:
//! * link down on the host's veth: the host sees carrier loss (a different fault, visible to
//!   the process through netlink) and packets queue on the dead link;
//! * `ip route add blackhole` in the hosts: local senders get EINVAL immediately, so it is not
//!   a silent drop at all;
//! * `tc … action drop`: needs the `act_gact` module, which some kernels (this machine's among
//!   them) lack; `act_mirred` and `cls_u32` are everywhere `tc` is.
//!
//! [`Cut::Reject`] installs `prohibit` routes inside the hosts instead: new connections fail at
//! once with EACCES, for tests that want fast failures rather than timeouts.
//!
//! Heal removes exactly what the faults added (the ingress qdiscs with their filters, the
//! prohibit routes); [`Lab::network_state`] shows the state to compare.

use std::collections::BTreeSet;

use anyhow::{Result, anyhow, bail};

use super::{Lab, ipn, tcn};

/// How a fault cuts traffic between two hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cut {
    /// Packets vanish at the switch (silent, like a real partition).
    #[default]
    Drop,
    /// The sender's kernel refuses at once (`prohibit` route: EACCES on connect).
    Reject,
}

/// What the current fault added, so heal can remove exactly that.
#[derive(Debug, Default)]
pub(super) struct Faults {
    /// Switch ports (host indices) with an ingress qdisc and drop filters.
    drop_ports: BTreeSet<usize>,
    /// `(host, peer)`: a prohibit route to `peer` inside `host`.
    reject_routes: BTreeSet<(usize, usize)>,
}

impl Lab {
    /// Cuts host `i` off from every other host, both directions (silent drops). The gateway
    /// still reaches it.
    pub fn isolate(&self, i: usize) -> Result<()> {
        let rest: Vec<usize> = (0..self.n).filter(|&j| j != i).collect();
        self.partition(&[&[i], &rest])
    }

    /// Splits the hosts into `groups` (each host in exactly one): hosts in different groups
    /// cannot reach each other, hosts in one group can. Replaces any earlier fault.
    pub fn partition(&self, groups: &[&[usize]]) -> Result<()> {
        self.partition_with(groups, Cut::Drop)
    }

    /// [`partition`](Self::partition) with a chosen [`Cut`].
    pub fn partition_with(&self, groups: &[&[usize]], cut: Cut) -> Result<()> {
        let mut group_of = vec![None; self.n];
        for (g, hosts) in groups.iter().enumerate() {
            for &h in *hosts {
                let slot = group_of
                    .get_mut(h)
                    .ok_or_else(|| anyhow!("partition names host {h} of a {}-host lab", self.n))?;
                if slot.replace(g).is_some() {
                    bail!("partition names host {h} twice");
                }
            }
        }
        if let Some(h) = group_of.iter().position(Option::is_none) {
            bail!("partition {groups:?} leaves out host {h}: name every host once");
        }
        let mut faults = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        self.heal_locked(&mut faults)?;
        for i in 0..self.n {
            let peers: Vec<usize> = (0..self.n)
                .filter(|&j| group_of[j] != group_of[i])
                .collect();
            if peers.is_empty() {
                continue;
            }
            match cut {
                Cut::Drop => {
                    let port = format!("p{i}");
                    tcn(&self.bridge_ns, &["qdisc", "add", "dev", &port, "ingress"])?;
                    faults.drop_ports.insert(i);
                    for j in peers {
                        let dst = format!("{}/32", self.addr_v4(j));
                        tcn(
                            &self.bridge_ns,
                            &[
                                "filter", "add", "dev", &port, "parent", "ffff:", "protocol", "ip",
                                "prio", "1", "u32", "match", "ip", "dst", &dst, "action", "mirred",
                                "egress", "redirect", "dev", "sink",
                            ],
                        )?;
                    }
                }
                Cut::Reject => {
                    for j in peers {
                        let dst = format!("{}/32", self.addr_v4(j));
                        ipn(&self.hosts[i], &["route", "add", "prohibit", &dst])?;
                        faults.reject_routes.insert((i, j));
                    }
                }
            }
        }
        Ok(())
    }

    /// Removes the current fault: every host reaches every other again.
    pub fn heal(&self) -> Result<()> {
        let mut faults = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        self.heal_locked(&mut faults)
    }

    pub(super) fn heal_locked(&self, faults: &mut Faults) -> Result<()> {
        let mut errors = Vec::new();
        for i in std::mem::take(&mut faults.drop_ports) {
            let port = format!("p{i}");
            if let Err(e) = tcn(&self.bridge_ns, &["qdisc", "del", "dev", &port, "ingress"]) {
                errors.push(format!("{e:#}"));
                faults.drop_ports.insert(i);
            }
        }
        for (i, j) in std::mem::take(&mut faults.reject_routes) {
            let dst = format!("{}/32", self.addr_v4(j));
            if let Err(e) = ipn(&self.hosts[i], &["route", "del", "prohibit", &dst]) {
                errors.push(format!("{e:#}"));
                faults.reject_routes.insert((i, j));
            }
        }
        if !errors.is_empty() {
            bail!("healing lab {} failed: {}", self.tag, errors.join("; "));
        }
        Ok(())
    }

    /// Everything faults may change, as text: the switch's qdiscs and filters and every host's
    /// IPv4 routes. Equal before a fault and after [`heal`](Self::heal).
    pub fn network_state(&self) -> Result<String> {
        let mut state = tcn(&self.bridge_ns, &["qdisc", "show"])?;
        for i in 0..self.n {
            let port = format!("p{i}");
            state += &tcn(
                &self.bridge_ns,
                &["filter", "show", "dev", &port, "ingress"],
            )?;
            state += &ipn(&self.hosts[i], &["-4", "route", "show", "table", "all"])?;
        }
        Ok(state)
    }
}
