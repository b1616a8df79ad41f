"""The Redis stock engine: keys, clients, the Lua scripts and their bindings, the reservation log.

Below orders and the sale: it knows nothing of activities or orders, only counters, sets and logs in Redis."""
