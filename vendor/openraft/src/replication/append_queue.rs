//! Patched (Baton): the AppendEntries requests a replication stream has not
//! sent yet, and the rule for which may go out while others are in flight.

use std::collections::VecDeque;

use crate::display_ext::DisplayOptionExt;
use crate::log_id_range::LogIdRange;
use crate::replication::request::DataWithId;
use crate::LogId;
use crate::NodeId;

/// AppendEntries requests from RaftCore, in order, not sent yet.
///
/// A request goes out behind the ones in flight only when it starts where the
/// last one sent ends, so that the follower can take them in turn; anything
/// else waits until nothing is in flight.
///
/// RaftCore sends a request that does not start where the one before it ends
/// (or a snapshot) only after it forgot every request in flight to the target:
/// an error or a conflict reset it. Requests still queued then were sent
/// before that, and are dropped: sent, they would be answered to no one, and
/// their entries may already be purged (the stream retries a read that returns
/// nothing, which would hold the new request back for good). Those already on
/// the wire are answered, and RaftCore ignores the answers.
pub(crate) struct AppendQueue<NID: NodeId> {
    queued: VecDeque<DataWithId<LogIdRange<NID>>>,

    /// Where the last request sent ends.
    last_sent: Option<LogId<NID>>,

    /// Where the last request received from RaftCore ends (`None`: none yet,
    /// or a snapshot since).
    last_received: Option<Option<LogId<NID>>>,
}

impl<NID: NodeId> Default for AppendQueue<NID> {
    fn default() -> Self {
        Self {
            queued: VecDeque::new(),
            last_sent: None,
            last_received: None,
        }
    }
}

impl<NID: NodeId> AppendQueue<NID> {
    /// A request from RaftCore, queued behind the others, or instead of them
    /// when it starts anew from the matching position.
    pub(crate) fn received(&mut self, request: DataWithId<LogIdRange<NID>>) {
        let starts_anew = self.last_received.as_ref().is_some_and(|end| &request.data().prev != end);
        if starts_anew && !self.queued.is_empty() {
            tracing::debug!(
                dropped = self.queued.len(),
                request = display(request.data()),
                "a request from the matching position: the queued ones are forgotten"
            );
            self.queued.clear();
        }
        self.last_received = Some(request.data().last.clone());
        self.queued.push_back(request);
    }

    /// RaftCore sends a snapshot: it forgot every request before it.
    pub(crate) fn snapshot_received(&mut self) {
        self.queued.clear();
        self.last_received = None;
    }

    /// A request to send before any other: the rest of one sent in part, or
    /// one to send again.
    pub(crate) fn push_front(&mut self, request: DataWithId<LogIdRange<NID>>) {
        self.queued.push_front(request);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// The request to send now, with `in_flight` requests unanswered: the
    /// first queued, if nothing is in flight or it starts where the last one
    /// sent ends.
    pub(crate) fn next(&mut self, in_flight: usize) -> Option<DataWithId<LogIdRange<NID>>> {
        let front = self.queued.front()?;
        if in_flight > 0 && front.data().prev != self.last_sent {
            tracing::debug!(
                front = display(front.data()),
                last_sent = display(self.last_sent.display()),
                "waits until nothing is in flight"
            );
            return None;
        }
        self.queued.pop_front()
    }

    /// A request was sent, carrying entries up to `last`.
    pub(crate) fn sent(&mut self, last: Option<LogId<NID>>) {
        self.last_sent = last;
    }
}

#[cfg(test)]
mod tests {
    use super::AppendQueue;
    use crate::log_id_range::LogIdRange;
    use crate::replication::request::DataWithId;
    use crate::replication::request_id::RequestId;
    use crate::testing::log_id;

    /// Request `id` for the entries after index `prev` up to index `last`.
    fn request(id: u64, prev: u64, last: u64) -> DataWithId<LogIdRange<u64>> {
        DataWithId::new(
            RequestId::new_append_entries(id),
            LogIdRange::new(Some(log_id(1, 1, prev)), Some(log_id(1, 1, last))),
        )
    }

    fn id_of(request: Option<DataWithId<LogIdRange<u64>>>) -> Option<u64> {
        request.and_then(|r| r.request_id().request_id())
    }

    #[test]
    fn a_request_goes_behind_the_one_in_flight_only_where_it_ends() {
        let mut queue = AppendQueue::default();
        queue.received(request(1, 5, 10));
        assert_eq!(Some(1), id_of(queue.next(0)));
        queue.sent(Some(log_id(1, 1, 10)));

        queue.received(request(2, 10, 14));
        assert_eq!(Some(2), id_of(queue.next(1)), "starts where request 1 ends");
        queue.sent(Some(log_id(1, 1, 14)));

        // The rest of a request sent in part (up to 12 of 14) goes first, and
        // does not start where the last sent one ends.
        queue.push_front(request(2, 12, 14));
        assert_eq!(None, id_of(queue.next(2)));
        assert_eq!(Some(2), id_of(queue.next(0)));
        assert!(queue.is_empty());
    }

    #[test]
    fn a_request_from_the_matching_position_replaces_the_queued_ones() {
        let mut queue = AppendQueue::default();
        queue.received(request(1, 5, 10));
        queue.next(0);
        queue.sent(Some(log_id(1, 1, 10)));
        // Request 2 is pipelined, and waits for a free network.
        queue.received(request(2, 10, 14));
        // Request 1 failed: RaftCore starts again from the match, 5.
        queue.received(request(3, 5, 14));

        assert_eq!(None, id_of(queue.next(1)), "not behind the one in flight");
        assert_eq!(Some(3), id_of(queue.next(0)));
        assert!(queue.is_empty(), "request 2 is forgotten");
    }

    #[test]
    fn a_snapshot_replaces_the_queued_requests() {
        let mut queue = AppendQueue::default();
        queue.received(request(1, 5, 10));
        queue.received(request(2, 10, 14));
        queue.snapshot_received();
        assert!(queue.is_empty());

        // After the snapshot, the next request starts wherever it ends.
        queue.received(request(4, 20, 30));
        queue.received(request(5, 30, 31));
        assert_eq!(Some(4), id_of(queue.next(0)));
        assert_eq!(Some(5), id_of(queue.next(0)));
    }
}
