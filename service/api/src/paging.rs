//! The one paging handler behind `GET /v1/locks` and `GET /v1/names`: settle the
//! read, walk the state machine's name-ordered index from the page token, skip
//! what the caller may not see, and hand out the next page's token.

use baton_core::StateMachine;

use crate::auth::{Caller, Kind};
use crate::error::ApiError;
use crate::request::{encode_page_token, settle_read, ListQuery};
use crate::state::ApiState;

/// One page of a list, read at one revision.
pub struct Listed<V> {
    /// Entries in name order, only those the caller may see.
    pub items: Vec<V>,
    /// Pass as `page_token` for the next page; `None` on the last page.
    pub next_page_token: Option<String>,
    /// Revision the page reflects.
    pub revision: u64,
}

/// Lists one page of `kind` for `query`: `fetch(sm, prefix, after, n)` returns up
/// to `n` entries after a name, `name_of` names an entry. The caller must be
/// allowed to list `kind` at all (checked by the handler, which knows the kind's
/// permission).
pub async fn list_page<V>(
    state: &ApiState,
    caller: &Caller,
    kind: Kind,
    query: &ListQuery,
    fetch: impl Fn(&StateMachine, &str, Option<&str>, usize) -> Vec<V>,
    name_of: fn(&V) -> &String,
) -> Result<Listed<V>, ApiError> {
    let limit = query.limit()?;
    let after = query.after()?;
    settle_read(state, &query.read()).await?;
    let prefix = query.prefix.clone().unwrap_or_default();
    let (items, revision) = state.node.read(|sm| {
        let fetch = |after: Option<&str>, n| fetch(sm, &prefix, after, n);
        let page = visible_page(caller, kind, &prefix, after, limit, fetch, name_of);
        (page, sm.revision())
    });
    let next_page_token = next_page_token(
        items.last().map(|v| name_of(v).as_str()),
        items.len(),
        limit,
    );
    Ok(Listed {
        items,
        next_page_token,
        revision,
    })
}

/// One page of a list, with only the names `caller` may see of `kind`:
/// `fetch(after, n)` lists up to `n` entries after a name, and entries the caller
/// may not see are skipped, fetching on until the page is full or the list ends.
fn visible_page<T>(
    caller: &Caller,
    kind: Kind,
    prefix: &str,
    after: Option<String>,
    limit: usize,
    fetch: impl Fn(Option<&str>, usize) -> Vec<T>,
    name_of: impl Fn(&T) -> &String,
) -> Vec<T> {
    if caller.may_all_under(kind, prefix) {
        return fetch(after.as_deref(), limit);
    }
    let mut page = Vec::new();
    let mut cursor = after;
    loop {
        let batch = fetch(cursor.as_deref(), limit);
        let ended = batch.len() < limit;
        cursor = batch.last().map(|entry| name_of(entry).clone());
        page.extend(
            batch
                .into_iter()
                .filter(|entry| caller.may(kind, name_of(entry))),
        );
        if page.len() >= limit || ended || cursor.is_none() {
            page.truncate(limit);
            return page;
        }
    }
}

/// The token of the page after one that ended at `last`: none when the page was
/// not full (there is nothing after it).
fn next_page_token(last: Option<&str>, len: usize, limit: usize) -> Option<String> {
    (len == limit)
        .then(|| last.map(encode_page_token))
        .flatten()
}
