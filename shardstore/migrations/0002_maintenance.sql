-- 0002: partition maintenance (issue 3). Reserved.
SELECT 1;
