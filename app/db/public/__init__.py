"""Read models: what readers of the store get (the API's JSON contract, FastAPI's "Public" models).

`Store` builds them from table rows (`quanta.db.models`); the API returns them as they are. Their field
names and shapes are a contract the dashboard and the SDK read: change them only with both.

One module per resource, each imported from directly (this package re-exports nothing):

- `readable`: how stored values are shown (`parsed_spec`, `shown`, `finite`, `device_list`, `id_list`),
  shared by the others and by the store's queries.
- `searches`: a search as listed and read, its progress, and what users send about one (`SearchPatch`,
  `SearchResume`).
- `users`: users, roles and their bounds, users' shares of device time, API tokens.
- `trials`: a trial, its curve and quanta, and a search's views over its trials (curves, timeline,
  best so far).
- `cluster`: the devices and packed pairs as the controller last published them.
- `lineage`: fork requests and a search's family tree of trials.
"""
