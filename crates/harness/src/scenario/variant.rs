//! Protocol variants: each entry of a scenario's `protocols` (or `--protocols`) is
//! `[LABEL:]PROTOCOL[KEY=VALUE,...]`, a registered protocol with its own parameters on top of
//! `[cluster.params]`, checked by building the protocol once.

use synod_core::ProtocolParams;

/// One protocol run of a scenario: a registered protocol with its own parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    /// Names the variant in plots, `normalized.csv` and summaries.
    pub label: String,
    /// The registered protocol's name.
    pub protocol: String,
    /// `[cluster.params]` with the variant's assignments applied.
    pub params: ProtocolParams,
}

impl Variant {
    /// Parse `[LABEL:]PROTOCOL[KEY=VALUE,...]` on top of `base`, and check the parameters by
    /// building the protocol for a cluster of `replicas`.
    pub fn parse(text: &str, base: &ProtocolParams, replicas: u32) -> Result<Variant, String> {
        let text = text.trim();
        let bad = |why: String| format!("variant `{text}`: {why}");
        let (head, assignments) = match text.split_once('[') {
            None => (text, None),
            Some((head, rest)) => {
                let inner = rest
                    .strip_suffix(']')
                    .ok_or_else(|| bad("expected PROTOCOL[KEY=VALUE,...] with the `]` last".into()))?;
                if inner.contains('[') || inner.contains(']') {
                    return Err(bad("brackets do not nest".into()));
                }
                (head, Some(inner))
            }
        };
        let (label, protocol) = match head.split_once(':') {
            Some((l, p)) => (Some(l.trim()), p.trim()),
            None => (None, head.trim()),
        };
        if protocol.is_empty() {
            return Err(bad("no protocol named".into()));
        }
        let info = synod_protocols::registry::find(protocol).map_err(bad)?;
        let mut params = base.clone();
        let mut written = Vec::new();
        if let Some(inner) = assignments {
            let items: Vec<&str> = inner.split(',').map(str::trim).filter(|a| !a.is_empty()).collect();
            if items.is_empty() {
                return Err(bad("empty `[]`: give KEY=VALUE parameters or leave the brackets out".into()));
            }
            for a in items {
                params.set(a).map_err(bad)?;
                written.push(a.split_whitespace().collect::<String>());
            }
        }
        let setup = synod_protocols::registry::Setup { id: 1, members: (1..=replicas.max(1)).collect(), params };
        (info.build)(&setup).map_err(bad)?;
        let label = match label {
            Some("") => return Err(bad("empty label before `:`".into())),
            Some(l) if !l.chars().all(|c| c.is_ascii_alphanumeric() || "-_.+ ".contains(c)) => {
                return Err(bad(format!("label `{l}` must be letters, digits, spaces, `-`, `_`, `.` or `+`")))
            }
            Some(l) => l.to_string(),
            None if written.is_empty() => info.name.to_string(),
            None => format!("{}[{}]", info.name, written.join(",")),
        };
        Ok(Variant { label, protocol: info.name.to_string(), params: setup.params })
    }

    /// The folder (and bench target label) of this variant: `raft+` → `raft-plus`,
    /// `holipaxos[trim=quorum]` → `holipaxos-trim-quorum`.
    pub fn dir_name(&self) -> String {
        let mut out = String::new();
        for c in self.label.replace('+', "-plus").chars() {
            let c = if c.is_ascii_alphanumeric() || c == '_' || c == '.' { c } else { '-' };
            if !(c == '-' && (out.is_empty() || out.ends_with('-'))) {
                out.push(c);
            }
        }
        out.trim_end_matches('-').to_string()
    }
}

/// Split a comma-separated variant list at the commas outside brackets:
/// `holipaxos[trim=quorum,compact_every=10],raft+` is two variants.
pub fn split_variants(list: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in list.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth <= 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter().map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect()
}

/// Parse a list of variants, refusing two that would share a folder.
pub(super) fn parse_variants(texts: &[String], base: &ProtocolParams, replicas: u32) -> Result<Vec<Variant>, String> {
    let mut out: Vec<Variant> = Vec::new();
    for t in texts {
        let v = Variant::parse(t, base, replicas)?;
        if let Some(o) = out.iter().find(|o| o.dir_name() == v.dir_name()) {
            return Err(format!(
                "variants `{}` and `{}` would share the output folder `{}`; give one a label (LABEL:{})",
                o.label,
                v.label,
                v.dir_name(),
                t.trim()
            ));
        }
        out.push(v);
    }
    Ok(out)
}
