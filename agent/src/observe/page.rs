//! The status page at `/` of the metrics listener: one self-contained HTML file (no external
//! assets) whose script asks `status.json` every few seconds and draws the members, the
//! leader, recent membership events, FleetLock holders and leases. Read-only.

use serde::Serialize;

use crate::agent::Here;
use crate::api::ApiError;
use crate::api::probe::MemberProbe;
use crate::api::types::Status;
use crate::clock::now_ms;

/// `GET /status.json`: what the page draws.
#[derive(Debug, Clone, Serialize)]
pub struct PageData {
    pub status: Status,
    /// Every member's own report (certificate expiry, version), as `muster plan` gathers it.
    pub probes: Vec<MemberProbe>,
    pub fleetlock: Vec<GroupRow>,
    pub leases: Vec<LeaseRow>,
    pub now_ms: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupRow {
    pub group: String,
    pub slots: u32,
    pub holders: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LeaseRow {
    pub name: String,
    pub holder: String,
    pub token: u64,
    pub remaining_ms: u64,
}

/// The page's data: status and probes as `muster plan` sees them, FleetLock and leases from
/// this node's applied state.
pub async fn data(here: Here<'_>) -> Result<PageData, ApiError> {
    let report = crate::leader::probe::report(here).await?;
    let (fleetlock, leases) = here.raft().read_local(|s| {
        let groups = s
            .fleetlock
            .groups
            .iter()
            .map(|(name, g)| GroupRow {
                group: name.clone(),
                slots: g.slots,
                holders: g.holders.keys().cloned().collect(),
            })
            .collect();
        let clock = s.leases.clock_ms;
        let leases = s
            .leases
            .held
            .iter()
            .filter(|(_, l)| l.expires_ms > clock)
            .map(|(name, l)| LeaseRow {
                name: name.clone(),
                holder: l.holder.clone(),
                token: l.token,
                remaining_ms: l.expires_ms - clock,
            })
            .collect();
        (groups, leases)
    })?;
    Ok(PageData {
        status: report.status,
        probes: report.probes,
        fleetlock,
        leases,
        now_ms: now_ms(),
    })
}

/// The page itself.
pub const HTML: &str = r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>muster</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.3em; margin: 0 0 .3em; }
  h2 { font-size: 1.05em; margin: 1.4em 0 .4em; }
  table { border-collapse: collapse; }
  th, td { padding: .2em .8em .2em 0; text-align: left; border-bottom: 1px solid #eee; }
  th { font-weight: 600; color: #555; }
  .bad { color: #b00020; font-weight: 600; }
  .ok { color: #1b5e20; }
  .muted { color: #777; }
  #error { color: #b00020; }
</style>
</head>
<body>
<h1>muster cluster <span id="cluster">…</span></h1>
<div>leader <b id="leader">…</b> · term <span id="term">…</span> · this page from <span id="self">…</span> · <span id="updated" class="muted">loading</span></div>
<div id="error"></div>
<div id="waiting"></div>
<h2>Members</h2>
<table id="members"><thead><tr><th>name</th><th>address</th><th>role</th><th>reachable</th><th>lag</th><th>version</th><th>certificate expires</th></tr></thead><tbody></tbody></table>
<h2>Recent membership events</h2>
<table id="events"><thead><tr><th>when</th><th>change</th><th>cause</th></tr></thead><tbody></tbody></table>
<h2>FleetLock</h2>
<table id="fleetlock"><thead><tr><th>group</th><th>slots</th><th>holders</th></tr></thead><tbody></tbody></table>
<h2>Leases</h2>
<table id="leases"><thead><tr><th>name</th><th>holder</th><th>fencing token</th><th>remaining</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
}
function fill(id, rows, draw, empty) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  if (rows.length === 0) {
    const tr = document.createElement("tr");
    cell(tr, empty, "muted");
    body.appendChild(tr);
  }
  for (const r of rows) {
    const tr = document.createElement("tr");
    tr.dataset.name = r.name || r.group || "";
    draw(tr, r);
    body.appendChild(tr);
  }
}
function days(ms, now) {
  if (ms == null) return "-";
  if (ms <= now) return "EXPIRED";
  return "in " + Math.floor((ms - now) / 86400000) + " days";
}
let busy = false;
async function refresh() {
  if (busy) return;
  busy = true;
  try {
    const answer = await fetch("status.json", { cache: "no-store" });
    if (!answer.ok) throw new Error("status.json answered " + answer.status);
    const d = await answer.json();
    const s = d.status;
    document.getElementById("cluster").textContent = s.cluster_id;
    document.getElementById("leader").textContent = s.leader || "none";
    document.getElementById("leader").className = s.leader ? "" : "bad";
    document.getElementById("term").textContent = s.term;
    document.getElementById("self").textContent = s.self;
    document.getElementById("waiting").textContent = (s.membership_waiting || []).join(" · ");
    const probe = {};
    for (const p of d.probes) probe[p.name] = p;
    const commit = s.commit_index;
    fill("members", s.members, (tr, m) => {
      const p = probe[m.name] || {};
      const r = p.report || {};
      cell(tr, m.name);
      cell(tr, m.address);
      cell(tr, m.role);
      const reachable = m.reachable == null ? (p.report ? "yes" : "no") : (m.reachable ? "yes" : "no");
      cell(tr, reachable, reachable === "yes" ? "ok" : "bad");
      cell(tr, m.match_index == null ? "-" : String(Math.max(0, commit - m.match_index)));
      cell(tr, r.version || "-");
      cell(tr, days(r.cert_expires_ms, d.now_ms));
    }, "no members");
    const events = (s.membership_events || []).slice().reverse();
    fill("events", events, (tr, e) => {
      cell(tr, new Date(e.at_ms).toISOString().replace("T", " ").slice(0, 19) + "Z");
      cell(tr, e.change);
      cell(tr, e.cause);
    }, "none since this leader took over");
    fill("fleetlock", d.fleetlock, (tr, g) => {
      cell(tr, g.group);
      cell(tr, g.holders.length + "/" + g.slots);
      cell(tr, g.holders.join(", ") || "-");
    }, "no groups configured");
    fill("leases", d.leases, (tr, l) => {
      cell(tr, l.name);
      cell(tr, l.holder);
      cell(tr, String(l.token));
      cell(tr, Math.ceil(l.remaining_ms / 1000) + " s");
    }, "no lease held");
    document.getElementById("error").textContent = "";
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.loaded = "true";
  } catch (e) {
    document.getElementById("error").textContent = "cannot reach the agent: " + e.message;
  } finally {
    busy = false;
  }
}
refresh();
setInterval(refresh, 3000);
</script>
</body>
</html>
"##;
