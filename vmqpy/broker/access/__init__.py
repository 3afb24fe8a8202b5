"""Who may do what: the vmq_acl format and its matching, the ACL and password files in force and their reloads,
authentication, the failed-login table per address and the threads that hash passwords, the deny lines' word on
each delivery, the retained messages each client may keep. Imports nothing of the other rooms."""
