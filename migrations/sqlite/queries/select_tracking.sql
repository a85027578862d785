-- StatusView.position
SELECT notification_id FROM opledger_tracking WHERE projection = :projection AND upstream = :upstream
