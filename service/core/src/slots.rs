//! The slots of one kind (locks, elections or semaphores) by name, with the
//! counts a metrics scrape asks for kept up to date as slots change.

use std::ops::{Deref, DerefMut};

use compact_str::CompactString;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::slot::Slot;

/// What the slots of one kind add up to: kept with every change, so a scrape
/// reads it in O(1) instead of walking a million slots (issue 19: a scrape took
/// tens of milliseconds of CPU at a million holdings, every time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlotTally {
    /// Slots with at least one holder.
    pub held: usize,
    /// Requests waiting in line, over all slots.
    pub waiting: usize,
    /// Permits out (one per holding for locks and elections).
    pub in_use: u64,
}

impl SlotTally {
    fn of(slot: &Slot) -> Self {
        SlotTally {
            held: usize::from(!slot.holders.is_empty()),
            waiting: slot.queue.len(),
            in_use: slot.in_use(),
        }
    }

    fn add(&mut self, other: SlotTally) {
        self.held += other.held;
        self.waiting += other.waiting;
        self.in_use += other.in_use;
    }

    /// Saturating: a miscount must not stop applying (the property tests
    /// compare the tally with a count from scratch after every entry).
    fn subtract(&mut self, other: SlotTally) {
        self.held = self.held.saturating_sub(other.held);
        self.waiting = self.waiting.saturating_sub(other.waiting);
        self.in_use = self.in_use.saturating_sub(other.in_use);
    }
}

/// A slot's name as the map keeps it: names up to 24 bytes sit inside the
/// map's node, so a lookup compares bytes it already has in cache instead of
/// following a pointer to a heap copy of every name it passes (issue 19: at a
/// million locks those comparisons were 41 % of applying an expiry storm).
/// Longer names go to the heap as a `String` would. Written and read exactly as a
/// `String` (snapshots keep their format).
pub(crate) type SlotName = CompactString;

/// Slots of one kind by name. A persistent map: cloning the state for a snapshot
/// shares it instead of copying a million entries (see `machine.rs`). Every
/// change goes through [`SlotMut`], which moves the tally by the slot's change.
#[derive(Clone, Debug, Default)]
pub(crate) struct Slots {
    map: imbl::OrdMap<SlotName, Box<Slot>>,
    tally: SlotTally,
}

impl Slots {
    /// The slot named `name`.
    pub fn get(&self, name: &str) -> Option<&Slot> {
        self.map.get(name).map(Box::as_ref)
    }

    /// The slot named `name`, to change.
    pub fn get_mut(&mut self, name: &str) -> Option<SlotMut<'_>> {
        let slot = self.map.get_mut(name)?;
        Some(SlotMut::new(slot, &mut self.tally))
    }

    /// The slot named `name`, created empty if there is none.
    pub fn get_or_default(&mut self, name: &str) -> SlotMut<'_> {
        let slot = self.map.entry(SlotName::from(name)).or_default();
        SlotMut::new(slot, &mut self.tally)
    }

    /// Forgets the slot named `name`.
    pub fn remove(&mut self, name: &str) {
        if let Some(slot) = self.map.remove(name) {
            self.tally.subtract(SlotTally::of(&slot));
        }
    }

    /// The map itself, to read (pages of a listing).
    pub fn map(&self) -> &imbl::OrdMap<SlotName, Box<Slot>> {
        &self.map
    }

    /// What the slots add up to, without walking them.
    pub fn tally(&self) -> SlotTally {
        self.tally
    }

    /// What the slots add up to, counted from scratch (for consistency checks).
    pub fn counted_tally(&self) -> SlotTally {
        let mut tally = SlotTally::default();
        for slot in self.map.values() {
            tally.add(SlotTally::of(slot));
        }
        tally
    }
}

impl PartialEq for Slots {
    fn eq(&self, other: &Self) -> bool {
        // The tally follows from the map.
        self.map == other.map
    }
}

impl FromIterator<(String, Box<Slot>)> for Slots {
    fn from_iter<I: IntoIterator<Item = (String, Box<Slot>)>>(iter: I) -> Self {
        let map: imbl::OrdMap<SlotName, Box<Slot>> = iter
            .into_iter()
            .map(|(name, slot)| (SlotName::from(name), slot))
            .collect();
        Slots::from_map(map)
    }
}

impl Slots {
    fn from_map(map: imbl::OrdMap<SlotName, Box<Slot>>) -> Self {
        let mut slots = Slots {
            map,
            tally: SlotTally::default(),
        };
        slots.tally = slots.counted_tally();
        slots
    }
}

/// Written as the bare map (the tally is derived, not stored: snapshots keep
/// their format).
impl Serialize for Slots {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.map.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Slots {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        crate::persistent::ord_map(deserializer).map(Slots::from_map)
    }
}

/// A slot being changed: when dropped, the tally moves by what the change made
/// of it.
pub(crate) struct SlotMut<'a> {
    slot: &'a mut Slot,
    tally: &'a mut SlotTally,
    before: SlotTally,
}

impl<'a> SlotMut<'a> {
    fn new(slot: &'a mut Slot, tally: &'a mut SlotTally) -> Self {
        let before = SlotTally::of(slot);
        SlotMut {
            slot,
            tally,
            before,
        }
    }
}

impl Deref for SlotMut<'_> {
    type Target = Slot;

    fn deref(&self) -> &Slot {
        self.slot
    }
}

impl DerefMut for SlotMut<'_> {
    fn deref_mut(&mut self) -> &mut Slot {
        self.slot
    }
}

impl Drop for SlotMut<'_> {
    fn drop(&mut self) {
        self.tally.subtract(self.before);
        self.tally.add(SlotTally::of(self.slot));
    }
}
