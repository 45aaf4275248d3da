//! consul-template's functions on what the task sees: its environment
//! (`env`, `mustEnv`, `envOrDefault`: Nomad's variables and the task's
//! `env` block) and the files of its task dir (`file`, nowhere outside
//! it).

use template::{Args, Value};

use super::{read_in_dir, Context};

/// `env KEY`: the variable's value, empty if it is not set.
pub(super) fn env(a: &mut Args<'_>, task: &Context<'_>) -> Result<Value, String> {
    let key = a.string(0)?;
    Ok(Value::Str(task.env.get(&key).cloned().unwrap_or_default()))
}

/// `mustEnv KEY`: the variable's value, an error if it is not set.
pub(super) fn must_env(a: &mut Args<'_>, task: &Context<'_>) -> Result<Value, String> {
    let key = a.string(0)?;
    task.env
        .get(&key)
        .cloned()
        .map(Value::Str)
        .ok_or_else(|| format!("environment variable {key:?} is not set"))
}

/// `envOrDefault KEY DEFAULT`: the variable's value, or `DEFAULT` if it
/// is not set or empty.
pub(super) fn env_or_default(a: &mut Args<'_>, task: &Context<'_>) -> Result<Value, String> {
    let (key, default) = (a.string(0)?, a.string(1)?);
    Ok(Value::Str(
        task.env
            .get(&key)
            .filter(|v| !v.is_empty())
            .cloned()
            .unwrap_or(default),
    ))
}

/// `file PATH`: the text of a file in the task dir.
pub(super) fn file(a: &mut Args<'_>, task: &Context<'_>) -> Result<Value, String> {
    let path = a.string(0)?;
    let dir = task
        .task_dir
        .ok_or_else(|| format!("file {path:?}: no task dir to read from"))?;
    read_in_dir(dir, &path).map(Value::Str)
}
