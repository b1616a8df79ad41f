"""The fair waiting room (docs/WAITING-ROOM.md) of an activity whose admission is ``room``.

Everything lives in the stock Redis under the activity's hash tag (stock.keys ``room_*``),
changed by the Lua scripts lua/room_*.lua:

- queue: joining, one place per account. Before the start a joiner goes into the
  pre-queue set; at the start the draw (draw) turns it into places 1..N; later joiners
  queue first come, first served behind them.
- status: the tick (lua/room_tick.lua), run by the reads of the room's status at most
  twice a second per web process and by the beat every second: no-shows expire, the room
  closes when the stock is gone and reopens when units come back, and "now serving" moves
  at the admission rate, never past the cap on admitted-not-done shoppers nor past the
  units left.
- tickets: an admitted shopper's signed, single-use ticket, checked by the purchase gate.
"""
