-- 0003: GDPR purge (issue 3). Reserved.
SELECT 1;
