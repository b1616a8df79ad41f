"""Redis key names of one activity.

Every key carries the hash tag ``{a<id>}`` so that all keys one script touches live
in one Redis Cluster slot.

Sharded stock (``Activity.shards`` = S > 1): shard i > 0 has its own tag ``{a<id>s<i>}``
(its stock, loaded share, log, replay attempts and returned set); shard 0 keeps the
activity's own tag, so an entry's shard alone names its keys whatever S is. The
per-user claims live in P user partitions ``{a<id>u<p>}`` (users and failed hashes),
p = crc32(user id) % USER_PARTITIONS.
"""

import secrets
import zlib
from dataclasses import dataclass

# A design constant, not a setting: a shopper's partition is crc32(user id) % this, so a
# different value while a sharded activity is live would misplace every shopper's claim.
USER_PARTITIONS = 16


@dataclass(frozen=True)
class ActivityKeys:
    activity_id: int
    # "" for the activity itself (and shard 0), "s<i>" for shard i, "u<p>" for partition p.
    part: str = ""

    @property
    def tag(self) -> str:
        return f"{{a{self.activity_id}{self.part}}}"

    def shard(self, index: int) -> "ActivityKeys":
        """The keys of stock shard ``index``; shard 0 is the activity's own tag."""
        return ActivityKeys(self.activity_id, f"s{index}" if index else "")

    def shards(self, count: int) -> list["ActivityKeys"]:
        return [self.shard(i) for i in range(count)]

    def partition(self, index: int) -> "ActivityKeys":
        """The keys of user partition ``index`` (its ``users`` and ``failed`` hashes)."""
        return ActivityKeys(self.activity_id, f"u{index}")

    def user_partition(self, user_id: int, partitions: int) -> "ActivityKeys":
        # crc32, not hash(): the same partition in every process and after restarts.
        return self.partition(zlib.crc32(str(user_id).encode()) % partitions)

    @property
    def scan_patterns(self) -> list[str]:
        """SCAN patterns matching every key of the activity, its shards and partitions."""
        return [f"*{self.tag}*", f"*{{a{self.activity_id}[su][0-9]*}}*"]

    @property
    def stock(self) -> str:
        """Units Redis may still sell (missing = not warmed, never "sold out")."""
        return f"seckill:{self.tag}:stock"

    @property
    def loaded(self) -> str:
        """Units warm-up loaded: the left side of the reconciliation identity."""
        return f"seckill:{self.tag}:loaded"

    @property
    def reserve(self) -> str:
        """Units of the database reserve not handed to Redis's share yet, as far as Redis
        knows: never fewer than the database holds (the database path only lowers the
        reserve, and only the hand-over lowers this). While any is left, a stock that
        cannot cover a purchase is not "sold out" (the hand-over comes first). On the
        activity's own tag (shard 0's)."""
        return f"seckill:{self.tag}:reserve"

    @property
    def handed(self) -> str:
        """Units the database released to Redis's share (the reserve's hand-over, the
        database path's cancelled orders) that this stock holds: the hand-over adds only
        what the database's count has beyond it, so it is idempotent. On the activity's
        own tag (shard 0's)."""
        return f"seckill:{self.tag}:handed"

    @property
    def handover_lock(self) -> str:
        """The lock that lets one process at a time hand the reserve over (redis-py Lock)."""
        return f"seckill:{self.tag}:handover-lock"

    @property
    def restocks(self) -> str:
        """How many times this shard's stock went up (a return, a release, a hand-over, a
        warm-up): a reader that saw every shard short twice with no restock in between
        knows they were all short at one moment (S > 1's "sold out")."""
        return f"seckill:{self.tag}:restocks"

    @property
    def epoch(self) -> str:
        """The warm-up that wrote this stock (stock.identity): a restore or a flush shows here."""
        return f"seckill:{self.tag}:epoch"

    @property
    def users(self) -> str:
        """Hash: user id -> reservation id of the shopper's live reservation."""
        return f"seckill:{self.tag}:users"

    @property
    def log(self) -> str:
        """Stream: reservations not yet turned into orders (entry id = reservation id)."""
        return f"seckill:{self.tag}:log"

    @property
    def drain(self) -> str:
        """Flag with a short lifetime: a drain task has been asked for (set by the purchase
        script, so a flood publishes a few tasks a second instead of one per purchase)."""
        return f"seckill:{self.tag}:drain"

    @property
    def attempts(self) -> str:
        """Hash: reservation id -> replay attempts so far."""
        return f"seckill:{self.tag}:attempts"

    @property
    def pending(self) -> str:
        """S > 1, user partition: sorted set, user id -> when (ms) their claim was taken,
        while it is pending (the shard step has not settled it); reconciliation reads it."""
        return f"seckill:{self.tag}:pending"

    @property
    def failed(self) -> str:
        """Hash: user id -> why their reservation was released without an order."""
        return f"seckill:{self.tag}:failed"

    @property
    def returned(self) -> str:
        """Set: order numbers whose units were returned to Redis (makes returns idempotent)."""
        return f"seckill:{self.tag}:returned"

    @property
    def admission(self) -> str:
        """Hash: the admission token bucket (tokens, last refill in ms)."""
        return f"seckill:{self.tag}:admission"

    @property
    def snapshot(self) -> str:
        """The cached ActivitySnapshot (cache Redis), tagged with the generation it was built at."""
        return f"seckill:{self.tag}:snapshot"

    @property
    def snapshot_gen(self) -> str:
        """Bumped by every change to the activity: a snapshot of an older generation is stale."""
        return f"seckill:{self.tag}:snapshot-gen"

    @property
    def snapshot_lock(self) -> str:
        return f"seckill:{self.tag}:snapshot-lock"

    def captcha(self, challenge_id: str) -> str:
        """One captcha challenge: "<user id>:<answer>", deleted by the first attempt."""
        return f"seckill:{self.tag}:captcha:{challenge_id}"

    # --- the waiting room (seckill.room, lua/room_*.lua) ----------------------------

    @property
    def room_state(self) -> str:
        """Hash: sealed, serving (places let in so far), ts and credit of the admission
        clock, paused, closed_ms, admitted/noshows/used counts, seed, commitment."""
        return f"seckill:{self.tag}:room:state"

    @property
    def room_pre(self) -> str:
        """Set: user ids who joined during the pre-queue (shuffled into places at the start)."""
        return f"seckill:{self.tag}:room:pre"

    @property
    def room_queue(self) -> str:
        """List: user ids in place order (place = index + 1)."""
        return f"seckill:{self.tag}:room:queue"

    @property
    def room_places(self) -> str:
        """Hash: user id -> place."""
        return f"seckill:{self.tag}:room:places"

    @property
    def room_active(self) -> str:
        """Sorted set: admitted shoppers not yet done, scored by the end of their window (ms)."""
        return f"seckill:{self.tag}:room:active"

    @property
    def room_admitted(self) -> str:
        """Hash: user id -> when (ms) the room let them in."""
        return f"seckill:{self.tag}:room:admitted"

    @property
    def room_tickets(self) -> str:
        """Hash: user id -> the nonce of the ticket issued to them."""
        return f"seckill:{self.tag}:room:tickets"

    @property
    def room_used(self) -> str:
        """Hash: user id -> when (ms) a purchase first tried their ticket."""
        return f"seckill:{self.tag}:room:used"

    @property
    def room_consumed(self) -> str:
        """Hash: user id -> the nonce of their ticket, consumed by a purchase that reserved."""
        return f"seckill:{self.tag}:room:consumed"

    @property
    def room_rate_samples(self) -> str:
        """List: "<ms>:<admitted>" samples, newest first, for the measured admission rate."""
        return f"seckill:{self.tag}:room:rate"

    @property
    def room_seal_lock(self) -> str:
        return f"seckill:{self.tag}:room:seal-lock"

    @property
    def lifecycle_lock(self) -> str:
        """The lock that lets warm-ups and the close of an activity run one at a time.
        No hash tag on purpose: the close removes every key carrying the activity's tag
        while it holds this one (a lock touches one key, so any slot will do)."""
        return f"seckill:lifecycle:a{self.activity_id}"

    def expiry_scheduled(self, due_second: int) -> str:
        """Flag: a payment-deadline task is scheduled for this second (Unix time)."""
        return f"seckill:{self.tag}:expiry:{due_second}"

    def all(self) -> list[str]:
        return [
            self.stock,
            self.loaded,
            self.reserve,
            self.handed,
            self.restocks,
            self.epoch,
            self.users,
            self.log,
            self.drain,
            self.attempts,
            self.failed,
            self.pending,
            self.returned,
            self.admission,
        ]


def claim_value(shard: int, reservation_id: str) -> str:
    """S > 1: what a user partition records for a shopper's reservation."""
    return f"{shard}:{reservation_id}"


# S > 1: the prefix of a claim while the shard scripts run (no reservation yet).
CLAIM_PENDING = "*"


def claim_pending(now_ms: int) -> str:
    """A pending claim: when it was taken (so a claim an error left behind can be told
    from one in flight) and a nonce (so only the purchase that took it settles it)."""
    return f"{CLAIM_PENDING}{now_ms}-{secrets.token_hex(4)}"


def claim_pending_since(claim: str) -> int | None:
    """When a pending claim was taken (Unix ms); None for a claim naming a reservation."""
    if not claim.startswith(CLAIM_PENDING):
        return None
    return int(claim[len(CLAIM_PENDING) :].split("-", 1)[0])
