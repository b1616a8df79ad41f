"""One active account per e-mail address, whatever its case, held by the database: the
sign-up form's check alone lets two concurrent sign-ups through. A unique index on an
expression of auth_user (another app's table, so no UniqueConstraint here), partial:
empty addresses and deactivated accounts are free. UPPER, as Django's iexact compares,
so the form's check reads the index too. Addresses shared already stop the migration
with the accounts named, before the index is tried."""

from django.db import migrations

INDEX = "accounts_user_email_active_unique"

SHARED_ADDRESSES_REFUSED = """
DO $$
DECLARE
    shared text;
BEGIN
    SELECT string_agg(address || ': ' || usernames, '; ' ORDER BY address) INTO shared
    FROM (
        SELECT min(LOWER(email)) AS address, string_agg(username, ', ' ORDER BY username) AS usernames
        FROM auth_user
        WHERE is_active AND email <> ''
        GROUP BY UPPER(email)
        HAVING count(*) > 1
    ) AS groups;
    IF shared IS NOT NULL THEN
        RAISE EXCEPTION 'accounts 0002: active accounts share an e-mail address (case ignored): %', shared
            USING HINT = 'Give each account its own address, empty it, or deactivate the extra accounts; then migrate again.';
    END IF;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.RunSQL(
            sql=[
                SHARED_ADDRESSES_REFUSED,
                f"CREATE UNIQUE INDEX {INDEX} ON auth_user (UPPER(email)) WHERE is_active AND email <> ''",
            ],
            reverse_sql=f"DROP INDEX IF EXISTS {INDEX}",
        ),
    ]
