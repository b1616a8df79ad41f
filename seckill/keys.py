"""Redis key names of one activity.

Every key carries the hash tag ``{a<id>}`` so that all keys one script touches live
in one Redis Cluster slot.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class ActivityKeys:
    activity_id: int

    @property
    def tag(self) -> str:
        return f"{{a{self.activity_id}}}"

    @property
    def stock(self) -> str:
        """Units Redis may still sell (missing = not warmed, never "sold out")."""
        return f"seckill:{self.tag}:stock"

    @property
    def loaded(self) -> str:
        """Units warm-up loaded: the left side of the reconciliation identity."""
        return f"seckill:{self.tag}:loaded"

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

    @property
    def db_synced(self) -> str:
        """Database-path orders already counted in the stock (see seckill.fallback.stock_resync)."""
        return f"seckill:{self.tag}:dbsynced"

    @property
    def resync_lock(self) -> str:
        return f"seckill:{self.tag}:resync"

    def expiry_scheduled(self, due_second: int) -> str:
        """Flag: a payment-deadline task is scheduled for this second (Unix time)."""
        return f"seckill:{self.tag}:expiry:{due_second}"

    def all(self) -> list[str]:
        return [
            self.stock,
            self.loaded,
            self.users,
            self.log,
            self.drain,
            self.attempts,
            self.failed,
            self.returned,
            self.db_synced,
            self.admission,
        ]
