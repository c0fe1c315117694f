#!/bin/sh
# A kerneld hook that mails its event (issue #29; README "Hooks", docs/OPERATIONS.md).
#
# kerneld.toml:
#   [[hooks]]
#   name = "mail"
#   on = ["goal_finished", "goal_failed", "goal_cancelled", "new_best", "gpu_unhealthy", "daemon_restarted"]
#   command = ["/usr/local/lib/kerneld/mail.sh", "ops@example.org"]
#   timeout = "30s"
#   # env = { SENDMAIL = "/usr/bin/msmtp", MAILFROM = "kerneld@lab.example.org" }
#
# Recipients: the arguments; none: $MAILTO, else the goal's owner (a local account,
# delivered or forwarded by the MTA), else root. SENDMAIL is any program that reads a
# message with its headers on stdin and takes `-t -i` (sendmail, postfix's and exim's
# sendmail, msmtp with a configured account). kerneld runs this as its own user, with
# only PATH, KERNELD_* and the hook's `env` in its environment, and the event as JSON on
# stdin; it is killed at the hook's timeout.
set -eu

to="$*"
[ -n "$to" ] || to="${MAILTO:-${KERNELD_OWNER:-root}}"
sendmail="${SENDMAIL:-/usr/sbin/sendmail}"
summary="${KERNELD_SUMMARY:-kerneld: ${KERNELD_EVENT:-an event}}"
event_json="$(cat)"

# The subject as RFC 2047 (the summary has a "×"); kerneld keeps control characters out
# of every KERNELD_* variable, so no header can be added through a goal's name or reason.
subject="=?UTF-8?B?$(printf '%s' "$summary" | base64 | tr -d '\n')?="

{
    printf 'To: %s\n' "$(echo "$to" | tr ' ' ',')"
    printf 'From: %s\n' "${MAILFROM:-kerneld@${KERNELD_HOST:-localhost}}"
    printf 'Subject: %s\n' "$subject"
    printf 'MIME-Version: 1.0\nContent-Type: text/plain; charset=utf-8\n'
    printf 'X-Kerneld-Event: %s\n' "${KERNELD_EVENT:-}"
    printf '\n%s\n\n' "$summary"
    if [ -n "${KERNELD_GOAL:-}" ]; then
        printf 'More: kernelctl show %s   (report: kernelctl report %s -o report.html)\n\n' \
            "$KERNELD_GOAL" "$KERNELD_GOAL"
    fi
    printf 'The event, as kerneld gave it:\n%s\n' "$event_json"
} | "$sendmail" -t -i
