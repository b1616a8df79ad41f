"""A shopper's purchase, from the request to the reservation.

- ``body``: the request body, checked first (400).
- ``gates``: every check in API.md's order (``purchase_admit``), both ways in.
- ``authentication``: API tokens and sessions, cached in the process and in Redis.
- ``limits``: the client's address, the per-user and per-address limits, the admission cap.
- ``shoppers``: the blacklist and the facts eligibility rules read.
- ``captcha``, ``took_part``, ``limited``: the captcha, and what this process remembers of
  a shopper's earlier answers.
- ``reserve``: the stock script and the database reserve; ``fallback``: the purchase while
  the stock Redis is away.
- ``result``: the shopper's outcome; ``apis`` and ``serializers``: the JSON interface.
"""
