//! A key made for a member by a team's owner or admin, from the member's row of the team page:
//! the key form without the team choice, then its secret, shown once to its maker, who passes
//! it on (the member is told by e-mail; docs/teams.md "A key made for a member").

use super::keys::NewKeyForm;
use super::render::Shown;
use super::session::Viewer;
use super::view::{key_row, Form};
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::{TeamId, UserId};
use aigw_service::teams::TeamView;
use minijinja::context;

/// The form of a key for member `user_id` of `team`, with `values` and `error`.
fn form_page(
    viewer: &Viewer,
    team: &TeamView,
    user_id: &UserId,
    status: StatusCode,
    values: &NewKeyForm,
    error: Option<Shown>,
) -> HttpResponse {
    viewer.page(
        status,
        "key_new.html",
        context! {
            title => format!("New key for a member of team {}", team.name),
            section => "teams",
            form => values,
            team => context! { id => team.id, name => team.name },
            action => format!("/teams/{}/members/{user_id}/keys/new", team.id),
            cancel => format!("/teams/{}#members", team.id),
            error,
        },
    )
}

/// Team `id` as the viewer may read it.
async fn team_of(state: &AppState, viewer: &Viewer, id: &TeamId) -> Result<TeamView, Shown> {
    let reader = viewer.authorized::<op::ReadAccount>().map_err(Shown::from)?;
    state.teams.get_team(&reader, id).await.map_err(Shown::from)
}

/// `GET /teams/{id}/members/{user_id}/keys/new`: the key form for the member.
pub(crate) async fn new_form(
    state: web::Data<AppState>,
    viewer: Viewer,
    path: web::Path<(TeamId, UserId)>,
) -> HttpResponse {
    let (id, user_id) = path.into_inner();
    match team_of(&state, &viewer, &id).await {
        Ok(team) => {
            form_page(&viewer, &team, &user_id, StatusCode::OK, &NewKeyForm::defaults(), None)
        }
        Err(shown) => viewer.failure(&shown),
    }
}

/// `POST /teams/{id}/members/{user_id}/keys/new`: makes the key (owners and admins) and shows
/// its secret once; a refusal comes back in the form with what was typed.
pub(crate) async fn create(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    path: web::Path<(TeamId, UserId)>,
    form: Form<NewKeyForm>,
) -> HttpResponse {
    let (id, user_id) = path.into_inner();
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let team = match team_of(&state, &viewer, &id).await {
        Ok(team) => team,
        Err(shown) => return viewer.failure(&shown),
    };
    let created = async {
        let request = form.request()?;
        let caller = viewer.authorized::<op::CreateApiKey>().map_err(Shown::from)?;
        let made = state.teams.create_member_api_key(&caller, &id, &user_id, request).await;
        made.map_err(Shown::from)
    }
    .await;
    match created {
        Ok(created) => viewer.page(
            StatusCode::CREATED,
            "key_secret.html",
            context! { title => "Key created for a member", section => "teams",
            key => key_row(&created.view, None), secret => created.key,
            team => context! { id => team.id, name => team.name }, for_member => true },
        ),
        Err(error) => form_page(&viewer, &team, &user_id, error.status, &form, Some(error)),
    }
}
