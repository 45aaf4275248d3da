//! The names a `template` block may not call, and why: consul-template's
//! functions that read Consul, Vault or Nomad's variables, which
//! csi-agent does not have; the two Nomad itself denies (`plugin`,
//! `writeToFile`); and the few consul-template functions csi-agent does
//! not implement. The engine words the error, `function "NAME" ` and the
//! reason, at the template's line, when the template is parsed.

/// Functions that read what csi-agent does not have, with what they need.
const REFUSED: &[(&str, &str)] = &[
    ("key", "Consul"),
    ("keyExists", "Consul"),
    ("keyOrDefault", "Consul"),
    ("ls", "Consul"),
    ("safeLs", "Consul"),
    ("tree", "Consul"),
    ("safeTree", "Consul"),
    ("service", "Consul"),
    ("services", "Consul"),
    ("connect", "Consul"),
    ("caLeaf", "Consul"),
    ("caRoots", "Consul"),
    ("datacenters", "Consul"),
    ("node", "Consul"),
    ("nodes", "Consul"),
    ("checks", "Consul"),
    ("partitions", "Consul"),
    ("peerings", "Consul"),
    ("exportedServices", "Consul"),
    ("byKey", "Consul"),
    ("byTag", "Consul"),
    ("byMeta", "Consul"),
    ("secret", "Vault"),
    ("secrets", "Vault"),
    ("pkiCert", "Vault"),
    ("nomadVar", "Nomad's variables"),
    ("nomadVarList", "Nomad's variables"),
    ("nomadVarListSafe", "Nomad's variables"),
    ("nomadVarExists", "Nomad's variables"),
];

/// Why `name`, which is no function of csi-agent's, is not one: `None`
/// for a name that is simply unknown ("not defined").
pub(super) fn explain(name: &str) -> Option<String> {
    if let Some((_, needs)) = REFUSED.iter().find(|(n, _)| *n == name) {
        return Some(format!("needs {needs}, which csi-agent does not have"));
    }
    match name {
        "plugin" | "writeToFile" => Some("is denied, as Nomad denies it by default".into()),
        "sha256Hex" | "md5sum" | "toYAML" | "parseYAML" | "toTOML" | "executeTemplate" => {
            Some("is not supported by csi-agent".into())
        }
        _ if name.starts_with("sprig_") => {
            Some("is not supported: csi-agent has no sprig functions".into())
        }
        _ => None,
    }
}
