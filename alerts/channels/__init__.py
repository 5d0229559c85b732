"""Alert channels beside e-mail: Dooray!, Slack and a signed generic webhook.

`planning` decides which incidents each channel is told about (beside the mail, in the same
outbox), `payloads` writes the message in each format, and `http` posts it: the only module
here that speaks HTTP. `alerts.delivery` sends the rows, mail and channel alike.
"""
